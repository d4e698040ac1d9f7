package ownership

import (
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestSettled: the partitions are settled while every one is where the
// assignment wants it, and not while a joining node's share waits for its
// warm handoffs; a move seen within the quiet asked for is not settled
// either.
func TestSettled(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	sv := newServing(t)
	cfg := func(name string) Config {
		return Config{Node: name, Partitions: 16, TTL: 60 * time.Second, RenewEvery: 200 * time.Millisecond,
			Serve: sv.serve(name)}
	}
	a := startNode(t, s, cfg("a"))
	eventually(t, "a alone is settled", func() bool { return a.m.Settled(0) })
	pr := newPreparing()
	bc := cfg("b")
	bc.Prepare = pr.prepare
	b := startNode(t, s, bc)
	eventually(t, "b prepares its share of 8 partitions", func() bool { return len(pr.running()) == 8 })
	eventually(t, "a sees b live", func() bool { return a.m.Assigned() == 8 })
	// No Prepare called warm: a keeps b's share, so neither is settled.
	for _, n := range []*node{a, b} {
		if n.m.Settled(0) {
			t.Errorf("%s: settled while b's 8 partitions wait for their warm handoff", n.m.Node())
		}
	}
	for _, p := range pr.running() {
		pr.makeWarm(p)
	}
	for _, n := range []*node{a, b} {
		eventually(t, n.m.Node()+" settled once b holds its share", func() bool { return n.m.Settled(0) })
		if n.m.Settled(time.Hour) {
			t.Errorf("%s: settled for an hour right after 8 moves", n.m.Node())
		}
	}
}
