package ownership

import (
	"testing"
	"time"
)

// TestSettled: the partitions are not settled while a joining node's
// share waits for its warm handoffs, are once it holds them, and are again
// once it left and the other holds all; a move seen within the quiet asked
// for is not settled either.
func TestSettled(t *testing.T) {
	pr := newPreparing()
	a, b, sv := joinSecond(t, time.Hour, pr.prepare)
	eventually(t, "b prepares its share of 4 partitions", func() bool { return len(pr.running()) == 4 })
	eventually(t, "a sees b live", func() bool { return a.m.Assigned() == 4 })
	// No Prepare called warm: a keeps b's share, so neither is settled.
	for _, n := range []*node{a, b} {
		if n.m.Settled(0) {
			t.Errorf("%s: settled while b's 4 partitions wait for their warm handoff", n.m.Node())
		}
	}
	for _, p := range pr.running() {
		pr.makeWarm(p)
	}
	for _, n := range []*node{a, b} {
		eventually(t, n.m.Node()+" settled once b holds its share", func() bool { return n.m.Settled(0) })
		if n.m.Settled(time.Hour) {
			t.Errorf("%s: settled for an hour right after 4 moves", n.m.Node())
		}
	}
	b.stop(t)
	eventually(t, "a serves all 8 after b stopped", func() bool { return len(sv.servedBy("a")) == 8 })
	eventually(t, "a settled alone", func() bool { return a.m.Settled(0) })
}
