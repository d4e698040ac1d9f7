package eventlog_test

import (
	"context"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// A read whose events are removed while it reads (a purge, or chunks aging
// out) returns what is left instead of waiting for events that will never
// come: the whole range gone, or its tail.
func TestReadOfRemovedEventsEnds(t *testing.T) {
	for _, c := range []struct {
		name   string
		before int // chunks a read of s1 can still find
	}{{"all removed", 0}, {"tail removed", 3}} {
		t.Run(c.name, func(t *testing.T) {
			lg, _ := eventlogtest.Open(t, eventlog.Config{})
			for range c.before {
				if _, err := appendChunk(t, lg, "a1", "s0"); err != nil {
					t.Fatal(err)
				}
			}
			for range 5 {
				if _, err := appendChunk(t, lg, "a1", "s1"); err != nil {
					t.Fatal(err)
				}
			}
			eventlog.BeforeRead(lg, func() {
				eventlog.BeforeRead(lg, nil)
				if err := lg.PurgeChunks(t.Context(), "a1", "s1"); err != nil {
					t.Error(err)
				}
			})
			// Generous: a read that waits for the removed events fails here
			// instead of hanging the test.
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			evs, err := lg.Read(ctx, eventlog.Filter{Agent: "a1", Chunks: true}, 0, 0)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if len(evs) != c.before {
				t.Fatalf("read %d chunks, want the %d left", len(evs), c.before)
			}
		})
	}
}
