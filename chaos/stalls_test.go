package main

import (
	"testing"
	"time"
)

// TestMeasureKill: between the kill and the victim's return, an agent
// outside its share that kept writing did not stall, one with a gap did;
// the victim's agent resumed at its first event after the kill, even past
// the victim's return; one that wrote nothing after stalled until then and
// counts as not resumed; an agent idle before the kill is not counted.
func TestMeasureKill(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	at := func(ms ...int) []time.Time {
		var out []time.Time
		for _, m := range ms {
			out = append(out, t0.Add(time.Duration(m)*time.Millisecond))
		}
		return out
	}
	k := stallKill{killed: t0.Add(10 * time.Second), ready: t0.Add(20 * time.Second),
		held: map[string]bool{"late": true, "gone": true}}
	times := map[string][]time.Time{
		"steady": at(9_900, 10_200, 10_500, 10_800, 11_100, 11_400, 11_700, 12_000, 12_300, 12_600, 12_900, 13_200, 13_500, 13_800,
			14_100, 14_400, 14_700, 15_000, 15_300, 15_600, 15_900, 16_200, 16_500, 16_800, 17_100, 17_400, 17_700, 18_000,
			18_300, 18_600, 18_900, 19_200, 19_500, 19_800, 20_100),
		"gappy": at(9_900, 10_100, 13_100, 20_050), // 3 s, then 6.9 s to the end
		"late":  at(9_500, 24_000),                 // the victim's: resumes at 14 s
		"gone":  at(9_800),                         // the victim's: never again
		"idle":  at(2_000, 10_500),                 // not writing when the kill came
	}
	r := measureKill([]string{"steady", "gappy", "late", "gone", "idle"}, times, k)
	if r.others != 2 || r.othersStalled != 1 || r.worstOther != 6900*time.Millisecond {
		t.Errorf("others: %+v", r)
	}
	if r.victims != 2 || r.victimsStalled != 2 || r.unresumed != 1 || r.slowestResume != 14*time.Second {
		t.Errorf("victim's: %+v", r)
	}
}
