package eventlog_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestFollowPlacementIsRead: on a replicated log, the placement check of
// a views consumer reads the server JetStream placed it on (a replica of
// its stream), and finds a healthy replica not behind. Were the server
// not read, the check would never place a consumer again.
func TestFollowPlacementIsRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	srvs := eventlogtest.RunCluster(t, 3)
	lg := eventlogtest.OpenOn(t, srvs[0], eventlog.Config{Replicas: 3})
	if _, err := appendNote(ctx, lg, "x"); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range srvs {
		names = append(names, s.Name())
	}
	for range 5 {
		server, behind, err := eventlog.FollowPlacement(ctx, lg, eventlog.DefaultEventsStream)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(names, server) {
			t.Fatalf("consumer placed on %q, want one of the stream's servers %v", server, names)
		}
		if behind {
			t.Fatalf("a healthy replica %q found far behind", server)
		}
	}
}

// TestFollowPlacedAgain: a views follow whose consumer is found on a
// replica far behind ends, and the Follower follows again from its last
// event at once, at most placeAgainTries (3) times a follow: the views
// end complete, each event applied once, and the checks stop after the
// third placement, which is kept.
func TestFollowPlacedAgain(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{})
	var checks atomic.Int32
	eventlog.PlacedBehind(lg, func(string) bool {
		checks.Add(1)
		return true // every consumer is behind: only the bound ends it
	})
	appendN(t, lg, 300, 3)
	a := named("a", 1, eventlog.Filter{})
	runFollower(t, lg, nil, a)
	checkViews(t, lg, 300, a)
	if got := checks.Load(); got != 3 {
		t.Errorf("placement checks = %d, want 3 (the bound)", got)
	}
}

// TestFollowPlacedAwayFromLeaving: on a replicated log, a views consumer
// JetStream placed on a server whose node is stopping (Config.Leaving)
// is placed again, as one on a replica far behind is: with every server
// named leaving, each placement is checked and dropped up to the bound,
// and the views still end complete. A stopping server hosts consumers
// through its lame duck second, and a catch-up placed there delivered
// nothing until it shut down (docs/benchmarks.md, stop 66).
func TestFollowPlacedAwayFromLeaving(t *testing.T) {
	srvs := eventlogtest.RunCluster(t, 3)
	var asked atomic.Int32
	lg := eventlogtest.OpenOn(t, srvs[0], eventlog.Config{Replicas: 3, Leaving: func(string) bool {
		asked.Add(1)
		return true
	}})
	appendN(t, lg, 300, 3)
	a := named("a", 1, eventlog.Filter{})
	runFollower(t, lg, nil, a)
	checkViews(t, lg, 300, a)
	if got := asked.Load(); got != 3 {
		t.Errorf("servers checked for a stopping node = %d, want 3 (the bound)", got)
	}
}
