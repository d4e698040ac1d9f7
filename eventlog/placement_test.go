package eventlog_test

import (
	"context"
	"slices"
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
