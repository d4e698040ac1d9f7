package eventlog_test

import (
	"fmt"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// Removals counts what purges removed from every stream of both kinds, on
// one stream of each and on shards, and appends leave it as it is: the
// figure verify.Check compares across its read of a live log.
func TestRemovalsCountsWhatPurgesRemove(t *testing.T) {
	for _, shards := range []int{0, 2} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			lg, _ := eventlogtest.Open(t, eventlog.Config{Shards: shards, Partitions: 4})
			removals := func() uint64 {
				t.Helper()
				n, err := lg.Removals(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			if n := removals(); n != 0 {
				t.Fatalf("a new log: %d removals", n)
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
			if n := removals(); n != 0 {
				t.Fatalf("after appends: %d removals, want 0", n)
			}
			for _, a := range []string{"a1", "a4"} {
				if err := lg.PurgeChunks(t.Context(), a, "s1"); err != nil {
					t.Fatal(err)
				}
			}
			if n := removals(); n != 4 {
				t.Fatalf("after purging two streams of 2 chunks: %d removals, want 4", n)
			}
			if _, err := appendChunk(t, lg, "a1", "s2"); err != nil {
				t.Fatal(err)
			}
			if n := removals(); n != 4 {
				t.Fatalf("after one more append: %d removals, want 4", n)
			}
		})
	}
}
