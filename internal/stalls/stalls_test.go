package stalls

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)

func at(ms ...int) []Stamp {
	var out []Stamp
	for _, m := range ms {
		out = append(out, Stamp{At: t0.Add(time.Duration(m) * time.Millisecond)})
	}
	return out
}

// TestMeasure: an agent outside the victim's share that kept writing did
// not stall; one that went quiet across the kill did, by its longest gap
// (the last one up to End included); the victim's agent resumed at its
// first event after the kill; an agent not writing before the kill is
// not counted; one that never wrote again stalled until the end and did
// not resume.
func TestMeasure(t *testing.T) {
	k := Kill{Killed: t0.Add(10 * time.Second), End: t0.Add(30 * time.Second),
		Victim: map[string]bool{"victim": true}, Active: 2 * time.Second, Limit: time.Second}
	times := map[string][]Stamp{
		"steady":  at(9_800, 10_050, 10_300, 10_550, 20_000, 20_250, 29_900),         // gaps up to 9.45 s
		"fine":    at(9_900, 10_100, 10_400, 10_700, 11_000),                         // stops: 19 s to the end
		"victim":  at(9_700, 25_000, 25_250),                                         // resumes 15 s after the kill
		"idle":    at(1_000, 12_000),                                                 // not writing at the kill
		"writing": at(9_750, 10_000, 10_250, 10_500, 10_750, 11_000, 29_500, 29_750), // one gap of 18.5 s
	}
	r := Measure([]string{"steady", "fine", "victim", "idle", "writing", "absent"}, times, k)
	if r.Victims != 1 || r.VictimsStalled != 1 || r.SlowestResume != 15*time.Second || r.Unresumed != 0 {
		t.Errorf("victim's: %+v", r)
	}
	if r.Others != 3 || r.OthersStalled != 3 || r.WorstOther != 19*time.Second || r.WorstOtherAgent != "fine" {
		t.Errorf("others: %+v", r)
	}

	// Agents that kept writing every 250 ms did not stall.
	times = map[string][]Stamp{"a": at(9_900, 10_150, 10_400, 10_650, 10_900), "b": at(9_950, 10_200, 10_450, 10_700, 10_950)}
	k.End, k.Victim = t0.Add(11*time.Second), nil
	r = Measure([]string{"a", "b"}, times, k)
	if r.Others != 2 || r.OthersStalled != 0 || r.WorstOther != 250*time.Millisecond {
		t.Errorf("steady writers: %+v", r)
	}
}

// TestMeasureResumeAfterEnd: with ResumeAfterEnd a victim's agent resumed
// at its first event after the kill even past End; one that wrote nothing
// after stalled until End and did not resume. Without it, the first is
// not resumed either.
func TestMeasureResumeAfterEnd(t *testing.T) {
	k := Kill{Killed: t0.Add(10 * time.Second), End: t0.Add(20 * time.Second),
		Victim: map[string]bool{"late": true, "gone": true}, Active: 2 * time.Second, Limit: 5 * time.Second, ResumeAfterEnd: true}
	times := map[string][]Stamp{
		"gappy": at(9_900, 10_100, 13_100, 20_050), // 3 s, then 6.9 s to the end
		"late":  at(9_500, 24_000),                 // the victim's: resumes at 14 s
		"gone":  at(9_800),                         // the victim's: never again
		"idle":  at(2_000, 10_500),                 // not writing when the kill came
	}
	agents := []string{"gappy", "late", "gone", "idle"}
	r := Measure(agents, times, k)
	if r.Others != 1 || r.OthersStalled != 1 || r.WorstOther != 6900*time.Millisecond {
		t.Errorf("others: %+v", r)
	}
	if r.Victims != 2 || r.VictimsStalled != 2 || r.Unresumed != 1 || r.SlowestResume != 14*time.Second {
		t.Errorf("victim's: %+v", r)
	}
	k.ResumeAfterEnd = false
	if r = Measure(agents, times, k); r.Unresumed != 2 || r.SlowestResume != 10*time.Second {
		t.Errorf("without ResumeAfterEnd: %+v", r)
	}
}

// TestMeasureVictimNode: with Kill.VictimNode an agent whose last event
// before the kill that node wrote is the victim's, though the share asked
// before the kill named another owner; one the victim wrote earlier but
// another node last is not.
func TestMeasureVictimNode(t *testing.T) {
	by := func(node string, ms ...int) []Stamp {
		ss := at(ms...)
		for i := range ss {
			ss[i].Node = node
		}
		return ss
	}
	k := Kill{Killed: t0.Add(10 * time.Second), End: t0.Add(20 * time.Second), VictimNode: "n1",
		Active: 2 * time.Second, Limit: time.Second, ResumeAfterEnd: true}
	stamps := map[string][]Stamp{
		"handed": append(by("n0", 9_000), append(by("n1", 9_500), by("n2", 16_000)...)...), // n0 handed it to n1 just before the kill
		"moved":  append(by("n1", 9_000), by("n2", 9_500, 9_800, 10_100, 10_400)...),       // n1 handed it on before the kill
	}
	r := Measure([]string{"handed", "moved"}, stamps, k)
	if r.Victims != 1 || r.SlowestResume != 6*time.Second || r.Others != 1 || r.OthersStalled != 1 {
		t.Errorf("with VictimNode: %+v", r)
	}
	k.VictimNode = ""
	if r = Measure([]string{"handed", "moved"}, stamps, k); r.Victims != 0 || r.Others != 2 {
		t.Errorf("without VictimNode: %+v", r)
	}
}

// TestMeasureWorstOtherGap: the others' worst stall names the events
// around it, with their writers; one that ran to End has no event after.
func TestMeasureWorstOtherGap(t *testing.T) {
	stamp := func(node string, ms int) Stamp {
		return Stamp{At: t0.Add(time.Duration(ms) * time.Millisecond), Node: node}
	}
	k := Kill{Killed: t0.Add(10 * time.Second), End: t0.Add(20 * time.Second), Active: 2 * time.Second, Limit: time.Second}
	stamps := map[string][]Stamp{
		"moved":  {stamp("n0", 9_800), stamp("n0", 10_100), stamp("n2", 14_100), stamp("n2", 19_900)}, // 5.8 s on n2 after a 4 s move
		"paused": {stamp("n0", 9_900), stamp("n0", 10_200), stamp("n0", 16_200)},                      // 6 s on one node, 3.8 s to the end
	}
	r := Measure([]string{"moved", "paused"}, stamps, k)
	want := Gap{Before: stamp("n0", 10_200), After: stamp("n0", 16_200)}
	if r.WorstOtherAgent != "paused" || r.WorstOther != 6*time.Second || r.WorstOtherGap != want {
		t.Errorf("worst other: %+v", r)
	}
	stamps["paused"] = stamps["paused"][:2] // silent from 10.2 s to the end
	r = Measure([]string{"moved", "paused"}, stamps, k)
	if want = (Gap{Before: stamp("n0", 10_200)}); r.WorstOther != 9800*time.Millisecond || r.WorstOtherGap != want {
		t.Errorf("worst other to the end: %+v", r)
	}
}
