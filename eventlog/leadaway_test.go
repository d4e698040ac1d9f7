package eventlog_test

import (
	"testing"
)

// TestLeadAway: a server that leads its share of an R3 log's streams
// gives every one of them to the other two, which lead 3 each once it
// returns, and appends go on; a second call finds nothing to move.
func TestLeadAway(t *testing.T) {
	ctx := t.Context()
	_, lg, agents := spreadCluster(t) // s0, s1 and s2 lead 2 each
	moved, err := lg.LeadAway(ctx, "s1", nil, nil)
	if err != nil || len(moved) != 2 {
		t.Fatalf("LeadAway moved %+v, %v; want s1's 2 streams", moved, err)
	}
	for _, ld := range moved {
		if ld.Want == "s1" || ld.Want == "" {
			t.Errorf("%s asked to step down for %q", ld.Stream, ld.Want)
		}
	}
	// LeadAway returned once the moved streams had their new leaders.
	leaders, err := lg.SpreadLeaders(ctx, func(string) bool { return false }) // reads, moves nothing
	counts := map[string]int{}
	for _, ld := range leaders {
		counts[ld.Leader]++
	}
	if err != nil || counts["s1"] != 0 || counts["s0"] != 3 || counts["s2"] != 3 {
		t.Errorf("after LeadAway: leaders %v, %v; want s1 none, s0 and s2 three each", counts, err)
	}
	for _, a := range agents {
		if _, err := appendNote(ctx, lg, a); err != nil {
			t.Fatalf("append after leading away: %v", err)
		}
	}
	if again, err := lg.LeadAway(ctx, "s1", nil, nil); len(again) != 0 || err != nil {
		t.Errorf("second LeadAway moved %+v, %v; want nothing", again, err)
	}
}
