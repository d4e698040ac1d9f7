package chat

import (
	"testing"
	"time"

	"github.com/forever-agents/forever/chat/cost"
)

func TestBudgetWindow(t *testing.T) {
	for _, tc := range []struct {
		name       string
		now        string
		period     time.Duration
		start, end string
	}{
		{name: "day", now: "2026-11-29T10:30:00Z", period: 24 * time.Hour, start: "2026-11-29T00:00:00Z", end: "2026-11-30T00:00:00Z"},
		{name: "hour", now: "2026-11-29T10:30:00Z", period: time.Hour, start: "2026-11-29T10:00:00Z", end: "2026-11-29T11:00:00Z"},
		{name: "on the boundary", now: "2026-11-29T00:00:00Z", period: 24 * time.Hour, start: "2026-11-29T00:00:00Z", end: "2026-11-30T00:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now, _ := time.Parse(time.RFC3339, tc.now)
			s, e := budgetWindow(now.In(time.FixedZone("x", 3600)), tc.period)
			if got, want := s.Format(time.RFC3339), tc.start; got != want {
				t.Errorf("start = %s, want %s", got, want)
			}
			if got, want := e.Format(time.RFC3339), tc.end; got != want {
				t.Errorf("end = %s, want %s", got, want)
			}
		})
	}
}

// TestSoftReached: the soft threshold is the fraction of a limit rounded
// up, a spend at it parks, and soft 1 never does.
func TestSoftReached(t *testing.T) {
	for _, tc := range []struct {
		name  string
		l     BudgetLimits
		tok   int64
		usd   cost.Micros
		limit string
		th    int64
	}{
		{name: "below", l: BudgetLimits{Tokens: 600, Soft: 0.5}, tok: 299},
		{name: "at", l: BudgetLimits{Tokens: 600, Soft: 0.5}, tok: 300, limit: "tokens", th: 300},
		{name: "rounded up", l: BudgetLimits{Tokens: 1, Soft: 0.8}, tok: 0},
		{name: "rounded up, reached", l: BudgetLimits{Tokens: 1, Soft: 0.8}, tok: 1, limit: "tokens", th: 1},
		{name: "no soft stop", l: BudgetLimits{Tokens: 600, Soft: 1}, tok: 599},
		{name: "cost", l: BudgetLimits{Cost: 1_000_000, Soft: 0.8}, usd: 800_000, limit: "cost", th: 800_000},
		{name: "no limit", l: BudgetLimits{Soft: 0.5}, tok: 1 << 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := softReached("a1", tc.l, tc.tok, tc.usd)
			if got, want := ok, tc.limit != ""; got != want {
				t.Fatalf("reached = %v, want %v (%+v)", got, want, p)
			}
			if ok && (p.Limit != tc.limit || p.Threshold != tc.th || p.Reason == "") {
				t.Fatalf("park = %+v, want limit %s at %d", p, tc.limit, tc.th)
			}
		})
	}
}
