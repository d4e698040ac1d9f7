package eventlog_test

import (
	"fmt"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// Removals counts what purges removed from the streams of each kind, on one
// stream of each and on shards, and appends leave it as it is: the figure
// verify.Check compares across its read of a live log.
func TestRemovalsCountsWhatPurgesRemove(t *testing.T) {
	for _, shards := range []int{0, 2} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			lg, _ := eventlogtest.Open(t, eventlog.Config{Shards: shards, Partitions: 4})
			removals := func() (events, chunks uint64) {
				t.Helper()
				var err error
				if events, err = lg.Removals(t.Context(), false); err != nil {
					t.Fatal(err)
				}
				if chunks, err = lg.Removals(t.Context(), true); err != nil {
					t.Fatal(err)
				}
				return events, chunks
			}
			if e, c := removals(); e != 0 || c != 0 {
				t.Fatalf("a new log: %d and %d removals", e, c)
			}
			for i := range 6 {
				agent := fmt.Sprintf("a%d", i)
				if _, err := lg.Append(t.Context(), eventlog.Event{Agent: agent, Type: "note", Data: []byte(`{}`)}); err != nil {
					t.Fatal(err)
				}
				for range 2 {
					if _, err := appendChunk(t, lg, agent, "s1"); err != nil {
						t.Fatal(err)
					}
				}
			}
			if e, c := removals(); e != 0 || c != 0 {
				t.Fatalf("after appends: %d and %d removals, want none", e, c)
			}
			for _, a := range []string{"a1", "a4"} {
				if err := lg.PurgeChunks(t.Context(), a, "s1"); err != nil {
					t.Fatal(err)
				}
			}
			if e, c := removals(); e != 0 || c != 4 {
				t.Fatalf("after purging two streams of 2 chunks: %d events and %d chunks removed, want 0 and 4", e, c)
			}
			if _, err := appendChunk(t, lg, "a1", "s2"); err != nil {
				t.Fatal(err)
			}
			if e, c := removals(); e != 0 || c != 4 {
				t.Fatalf("after one more append: %d and %d removals, want 0 and 4", e, c)
			}
		})
	}
}
