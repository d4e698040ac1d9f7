package ownership

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// drainPair starts node a, which prepares incoming partitions with pa,
// then node b, which prepares none (a hands it its share at once), with
// drain as b's DrainWait, and waits until they hold 8 each.
func drainPair(t *testing.T, drain time.Duration) (a, b *node, pa *preparing, sv *serving) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	sv = newServing(t)
	pa = newPreparing()
	cfg := func(name string) Config {
		return Config{Node: name, Partitions: 16, TTL: 60 * time.Second, RenewEvery: 200 * time.Millisecond,
			WarmWait: time.Hour, DrainWait: drain, Serve: sv.serve(name)}
	}
	ac := cfg("a")
	ac.Prepare = pa.prepare
	a = startNode(t, s, ac)
	b = startNode(t, s, cfg("b"))
	eventually(t, "a and b hold 8 each", func() bool { return len(sv.servedBy("a")) == 8 && len(sv.servedBy("b")) == 8 })
	return a, b, pa, sv
}

// TestDrainHandsOffWarm: a node that stops keeps serving its partitions
// while the node taking them prepares them, and hands each off once that
// node announces it warm; its stop returns once it holds none, and every
// handoff counts as warm. Meanwhile both nodes see b leaving.
func TestDrainHandsOffWarm(t *testing.T) {
	a, b, pa, sv := drainPair(t, time.Hour)
	share := sv.servedBy("b")
	stopped := make(chan struct{})
	go func() { b.stop(t); close(stopped) }()
	eventually(t, "a prepares b's 8 partitions", func() bool { return slices.Equal(pa.running(), share) })
	// What the leader spread reads: b is leaving, to itself and to a.
	if !b.m.Leaving("b") || !a.m.Leaving("b") || a.m.Leaving("a") {
		t.Errorf("Leaving: b says b %t, a says b %t and a %t; want true, true, false",
			b.m.Leaving("b"), a.m.Leaving("b"), a.m.Leaving("a"))
	}
	if got := sv.servedBy("b"); !slices.Equal(got, share) {
		t.Fatalf("b serves %v before any is warm, want %v still", got, share)
	}
	for _, p := range share[:4] {
		pa.makeWarm(p)
	}
	eventually(t, "a serves the 4 warm partitions", func() bool { return len(sv.servedBy("a")) == 12 })
	select {
	case <-stopped:
		t.Fatal("b's stop returned with 4 partitions not warm")
	default:
	}
	if got := sv.servedBy("b"); !slices.Equal(got, share[4:]) {
		t.Errorf("b serves %v, want %v (not warm yet)", got, share[4:])
	}
	for _, p := range share[4:] {
		pa.makeWarm(p)
	}
	<-stopped
	eventually(t, "a serves all 16", func() bool { return len(sv.servedBy("a")) == 16 })
	if got := handoffCount(b.m, handoffWarm); got != 8 {
		t.Errorf("b counted %v warm handoffs, want 8", got)
	}
}

// TestDrainBound: a stop whose partitions never go warm hands them off
// cold after DrainWait, not never.
func TestDrainBound(t *testing.T) {
	_, b, _, sv := drainPair(t, 300*time.Millisecond)
	b.stop(t)
	eventually(t, "a serves all 16", func() bool { return len(sv.servedBy("a")) == 16 })
	if got := handoffCount(b.m, handoffWarm) + handoffCount(b.m, handoffWaited); got != 0 {
		t.Errorf("b counted %v handoffs in its drain, want none (nothing went warm)", got)
	}
}

// TestNoDrainAlone: the last node not leaving stops at once: nobody would
// take its partitions.
func TestNoDrainAlone(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	sv := newServing(t)
	a := startNode(t, s, Config{Node: "a", Partitions: 8, TTL: 60 * time.Second, RenewEvery: 200 * time.Millisecond,
		DrainWait: time.Hour, Serve: sv.serve("a"), Prepare: newPreparing().prepare})
	a.stop(t) // with a drain it would wait an hour
	if got := sv.servedBy("a"); len(got) != 0 {
		t.Errorf("a still serves %v after its stop", got)
	}
}

// TestDrainToAnEarlierRelease: a node whose key does not say it knows a
// leaving node (an earlier release, which prepares none of a leaving
// node's partitions) is handed the drained partitions at once, not after
// DrainWait (an hour here).
func TestDrainToAnEarlierRelease(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	sv := newServing(t)
	cfg := func(name string) Config {
		return Config{Node: name, Partitions: 16, TTL: 60 * time.Second, RenewEvery: 200 * time.Millisecond,
			WarmWait: time.Hour, DrainWait: time.Hour, Serve: sv.serve(name)}
	}
	b := startNode(t, s, cfg("b"))
	// a announces warm partitions, but only while it joins: none of b's
	// once b leaves.
	var joining atomic.Bool
	joining.Store(true)
	ac := cfg("a")
	ac.Prepare = func(ctx context.Context, p int, warm func()) {
		if joining.Load() {
			warm()
		}
		<-ctx.Done()
	}
	startNodeWith(t, s, ac, func(m *Manager) { m.noDrains = true })
	eventually(t, "a and b hold 8 each", func() bool { return len(sv.servedBy("a")) == 8 && len(sv.servedBy("b")) == 8 })
	joining.Store(false)
	stopped := make(chan struct{})
	go func() { b.stop(t); close(stopped) }()
	eventually(t, "a serves all 16, handed at once", func() bool { return len(sv.servedBy("a")) == 16 })
	<-stopped
	if got := handoffCount(b.m, handoffUnannounced); got != 8 {
		t.Errorf("b counted %v handoffs to a node that does not know draining, want 8", got)
	}
}
