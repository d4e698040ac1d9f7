package verify_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/verify"
)

// verify reads a sharded log whole: every shard's events and chunks, the
// same report as the unsharded log's, and it still finds a violation.
func TestCheckShards(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	for i, k := range []int{2, 4} {
		t.Run(strconv.Itoa(k), func(t *testing.T) {
			lg := eventlogtest.OpenOn(t, s, eventlog.Config{
				Prefix:       fmt.Sprintf("s%d", i),
				EventsStream: fmt.Sprintf("SEVENTS_%d", i),
				ChunksStream: fmt.Sprintf("SCHUNKS_%d", i),
				Shards:       k, Partitions: 8,
			})
			shards := map[int]bool{}
			for _, a := range []string{"a1", "steps:b", "p1", "k1"} {
				shards[eventlog.PartitionOf(a, 8)%k] = true
			}
			if len(shards) < 2 {
				t.Fatalf("the history's agents are all in one shard of %d", k)
			}
			h := history{t, lg}
			clean(h)
			rep := check(t, lg, verify.Options{Acked: []verify.Ack{{Agent: "a1", ID: "r1"}, {Agent: "steps:b", ID: "f2"}}})
			if !rep.OK() || len(rep.Notes) != 0 {
				t.Fatalf("clean sharded history:\n%s", rep)
			}
			if got, want := [...]int{rep.Agents, rep.Fibers, rep.Turns, rep.Streams, rep.Acked, rep.UserMessages}, [...]int{4, 9, 7, 3, 2, 2}; got != want {
				t.Errorf("agents, fibers, turns, streams, acked, user messages = %v, want %v", got, want)
			}
			if rep2 := check(t, lg, verify.Options{PageSize: 3}); rep2.Events != rep.Events || rep2.ChunkEvents != rep.ChunkEvents || !rep2.OK() {
				t.Errorf("paged read: %s, want %s", rep2, rep)
			}
			// A fiber that ends twice, in a shard of its own.
			h.ev("z9", "fiber.started", m{"id": "fz", "name": "steps"})
			h.ev("z9", "fiber.completed", m{"id": "fz"})
			h.ev("z9", "fiber.completed", m{"id": "fz"})
			if rep := check(t, lg, verify.Options{}); rep.OK() {
				t.Fatalf("a fiber ending twice passed:\n%s", rep)
			}
		})
	}
}
