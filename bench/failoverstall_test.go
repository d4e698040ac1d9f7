package main

import (
	"testing"
	"time"
)

// TestMeasureStalls: an agent outside the victim's share that kept
// writing did not stall; one that went quiet across the kill did, by its
// longest gap; the victim's agent resumed at its first event after the
// kill; an agent not writing before the kill is not counted; one that
// never wrote again stalled until the end.
func TestMeasureStalls(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	at := func(ms ...int) []time.Time {
		var out []time.Time
		for _, m := range ms {
			out = append(out, t0.Add(time.Duration(m)*time.Millisecond))
		}
		return out
	}
	killed, end := t0.Add(10*time.Second), t0.Add(30*time.Second)
	times := map[string][]time.Time{
		"steady":  at(9_800, 10_050, 10_300, 10_550, 20_000, 20_250, 29_900),         // gaps up to 9.45 s
		"fine":    at(9_900, 10_100, 10_400, 10_700, 11_000),                         // stops: 19 s to the end
		"victim":  at(9_700, 25_000, 25_250),                                         // resumes 15 s after the kill
		"idle":    at(1_000, 12_000),                                                 // not writing at the kill
		"writing": at(9_750, 10_000, 10_250, 10_500, 10_750, 11_000, 29_500, 29_750), // one gap of 18.5 s
	}
	agents := []string{"steady", "fine", "victim", "idle", "writing", "absent"}
	share := loadShare{victim: map[string]bool{"victim": true}}
	ks := measureStalls(agents, times, share, killed, end)
	if ks.victims != 1 || ks.victimsStalled != 1 || ks.slowestResume != 15*time.Second || ks.unresumed != 0 {
		t.Errorf("victim's: %+v", ks)
	}
	if ks.others != 3 || ks.othersStalled != 3 || ks.worstOther != 19*time.Second || ks.worstOtherAgent != "fine" {
		t.Errorf("others: %+v", ks)
	}

	// Agents that kept writing every 250 ms did not stall.
	times = map[string][]time.Time{"a": at(9_900, 10_150, 10_400, 10_650, 10_900), "b": at(9_950, 10_200, 10_450, 10_700, 10_950)}
	ks = measureStalls([]string{"a", "b"}, times, loadShare{victim: map[string]bool{}}, killed, t0.Add(11*time.Second))
	if ks.others != 2 || ks.othersStalled != 0 || ks.worstOther != 250*time.Millisecond {
		t.Errorf("steady writers: %+v", ks)
	}
}
