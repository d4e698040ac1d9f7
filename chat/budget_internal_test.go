package chat

import (
	"testing"
	"time"
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
