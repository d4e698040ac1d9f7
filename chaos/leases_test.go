package main

import (
	"testing"
	"time"

	"github.com/forever-agents/forever/ownership"
)

// TestWithLeasesAt: an agent whose partition's last lease write before
// the kill named the victim is the victim's, though its owner asked
// before the kill was another node (a handoff in the instant between);
// a write after the kill, a lease the victim handed off or lost before
// it, and an agent already the victim's change nothing.
func TestWithLeasesAt(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 9, 6, 25, 0, time.UTC)
	const partitions = 16
	w := &stallWatch{leases: &leaseLog{writes: map[int][]leaseWrite{}}, partitions: partitions}
	byPart := map[int]string{}
	for i := 0; len(byPart) < 5; i++ {
		a := "steps:chaos-stall-" + string(rune('a'+i))
		if p := ownership.PartitionOf(a, partitions); byPart[p] == "" {
			byPart[p] = a
			w.agents = append(w.agents, a)
		}
	}
	var parts []int
	for _, a := range w.agents {
		parts = append(parts, ownership.PartitionOf(a, partitions))
	}
	l := w.leases
	l.wrote(parts[0], "forever-1", t0.Add(-time.Minute))
	l.wrote(parts[0], "", t0.Add(-20*time.Millisecond))          // handed off...
	l.wrote(parts[0], "forever-0", t0.Add(-10*time.Millisecond)) // ...to the victim, just before
	l.wrote(parts[1], "forever-0", t0.Add(-time.Minute))
	l.wrote(parts[1], "", t0.Add(-time.Second)) // handed off before the kill
	l.wrote(parts[2], "forever-1", t0.Add(-time.Minute))
	l.wrote(parts[2], "forever-0", t0.Add(time.Second)) // after it
	l.wrote(parts[3], "forever-2", t0.Add(-time.Minute))
	l.wrote(parts[4], "forever-0", t0.Add(-time.Minute)) // asked and found the victim's

	k := stallKill{victim: "forever-0", killed: t0, held: map[string]bool{w.agents[4]: true}, owned: 1}
	got := w.withLeasesAt(k)
	if got.owned != 2 || got.movedLeases != 1 {
		t.Fatalf("owned %d (%d moved), want 2 (1 moved)", got.owned, got.movedLeases)
	}
	for i, a := range w.agents {
		if want := i == 0 || i == 4; got.held[a] != want {
			t.Errorf("agent %s (partition %d): held %t, want %t", a, parts[i], got.held[a], want)
		}
	}
	if len(k.held) != 1 {
		t.Error("withLeasesAt changed the kill it was given")
	}
	if w2 := (&stallWatch{agents: w.agents}); w2.withLeasesAt(k).movedLeases != 0 {
		t.Error("without the lease watch, agents moved")
	}
}
