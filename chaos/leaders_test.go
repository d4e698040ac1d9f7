package main

import (
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
)

// TestWithLeadersAt: a shard whose last election before the kill named
// the victim is the victim's, though the leaders asked before the kill
// said otherwise, and its agents with it; an election after the kill, or
// one the victim lost before it, changes nothing.
func TestWithLeadersAt(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	ls := eventlog.LogStreams{Shards: 2, Partitions: 4, Events: []string{"FOREVER_EVENTS_0", "FOREVER_EVENTS_1"}}
	w := &stallWatch{ls: ls, leaders: &leaderLog{elect: map[string][]election{}}}
	for i := range 8 {
		w.agents = append(w.agents, "steps:chaos-stall-"+string(rune('a'+i)))
	}
	l := w.leaders
	l.elected("FOREVER_EVENTS_0", "forever-1", t0.Add(-time.Minute))
	l.elected("FOREVER_EVENTS_0", "forever-4", t0.Add(-140*time.Millisecond)) // the spread, just before
	l.elected("FOREVER_EVENTS_1", "forever-4", t0.Add(-time.Minute))
	l.elected("FOREVER_EVENTS_1", "forever-2", t0.Add(-time.Second)) // moved away before the kill
	l.elected("FOREVER_EVENTS_1", "forever-4", t0.Add(time.Second))  // after it
	l.elected(leasesStream, "forever-4", t0.Add(-time.Hour))

	k := stallKill{victim: "forever-4", killed: t0, held: map[string]bool{}, led: map[string]bool{}, shards: 2}
	got := w.withLeadersAt(k)
	if got.ledShards != 1 || got.movedShards != 1 || !got.led["FOREVER_EVENTS_0"] || got.led["FOREVER_EVENTS_1"] || !got.ledLeases {
		t.Fatalf("victim's shards: led %v (%d, %d moved), lease bucket %t; want FOREVER_EVENTS_0 alone, moved, and the lease bucket",
			got.led, got.ledShards, got.movedShards, got.ledLeases)
	}
	for _, a := range w.agents {
		if want := ls.EventsOf(a) == "FOREVER_EVENTS_0"; got.held[a] != want {
			t.Errorf("agent %s (on %s): held %t, want %t", a, ls.EventsOf(a), got.held[a], want)
		}
	}
	if len(got.held) == 0 || len(got.held) == len(w.agents) {
		t.Errorf("%d of %d agents on FOREVER_EVENTS_0: the test wants agents on both shards", len(got.held), len(w.agents))
	}
	if len(k.held) != 0 || len(k.led) != 0 {
		t.Error("withLeadersAt changed the kill it was given")
	}
}

// TestLeadersAround names a stream's leader at the kill and its elections
// around a stall, and says so when there were none.
func TestLeadersAround(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	l := &leaderLog{elect: map[string][]election{}}
	l.elected("S", "forever-1", t0.Add(-time.Minute))
	l.elected("S", "forever-2", t0.Add(3*time.Second))
	l.elected("S", "forever-0", t0.Add(time.Minute))
	got := l.around("S", t0, t0.Add(2500*time.Millisecond), t0.Add(5*time.Second))
	if want := "S led by forever-1 at the kill, elected forever-2 at 00:00:03.000 around the stall"; got != want {
		t.Errorf("around = %q, want %q", got, want)
	}
	if got, want := l.around("T", t0, t0, time.Time{}), "T led by unknown at the kill, no election around the stall"; got != want {
		t.Errorf("around = %q, want %q", got, want)
	}
}
