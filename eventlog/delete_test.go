package eventlog_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// withoutAgent returns m without the rows of agent.
func withoutAgent(m map[string]string, agent string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if !strings.HasSuffix(k, "/"+agent) {
			out[k] = v
		}
	}
	return out
}

// TestDeleteRemovesTheAgent: Delete leaves the agent's tombstones as all
// the log holds of it, the view without a row of it and the other agents'
// rows unchanged; a view rebuilt from an empty Pebble agrees; the id then
// starts a new agent from nothing, live and rebuilt alike. Also after a
// compaction of the agent, and after a purge that removed nothing.
func TestDeleteRemovesTheAgent(t *testing.T) {
	for _, name := range []string{"plain", "compacted", "purge-left-all"} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
			lg := openCounter(t, s, eventlog.Config{})
			// purge-left-all deletes agent0's events one at a time: 300
			// show it as well as 1,000 did, in a third of the requests.
			appendN(t, lg, 900, 3)
			for i := range 5 {
				for _, a := range []string{"agent0", "agent1"} {
					if _, err := lg.Append(ctx, eventlog.Event{Agent: a, Stream: "s1", Type: "chunk", ID: fmt.Sprintf("%s-s1/%d", a, i), Data: []byte(`{}`)}); err != nil {
						t.Fatal(err)
					}
				}
			}
			switch name {
			case "compacted":
				if _, err := lg.Compact(ctx, "agent0"); err != nil {
					t.Fatal(err)
				}
				appendN(t, lg, 30, 3)
			case "purge-left-all":
				eventlog.SkipPurgeOnce(lg)
			}
			waitAll(t, lg)
			before := dump(t, lg, "counter")

			d, err := lg.Delete(ctx, "agent0")
			if err != nil || d.Again {
				t.Fatalf("delete: %+v, %v", d, err)
			}
			waitAll(t, lg)
			want := withoutAgent(before, "agent0")
			if got := dump(t, lg, "counter"); !equalMaps(got, want) {
				t.Fatalf("after delete:\n%v\nwant\n%v", got, want)
			}
			evs, err := lg.Read(ctx, eventlog.Filter{Agent: "agent0"}, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != 1 || evs[0].Type != eventlog.TypeDeleted || evs[0].Seq != d.Seq {
				t.Fatalf("agent0's events after delete: %d, first %+v; want its tombstone alone", len(evs), evs)
			}
			chunks, err := lg.Read(ctx, eventlog.Filter{Agent: "agent0", Chunks: true}, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(chunks) != 1 || chunks[0].Type != eventlog.TypeDeleted || chunks[0].Stream != eventlog.DeletedStream {
				t.Fatalf("agent0's chunks after delete: %+v; want its chunks tombstone alone", chunks)
			}
			if other, _ := lg.Read(ctx, eventlog.Filter{Agent: "agent1", Chunks: true}, 0, 0); len(other) != 5 {
				t.Fatalf("agent1 has %d chunks, want its 5", len(other))
			}
			if _, err := lg.Compact(ctx, "agent0"); !errors.Is(err, eventlog.ErrNothingToCompact) {
				t.Fatalf("compact of a deleted agent: %v, want ErrNothingToCompact", err)
			}
			again, err := lg.Delete(ctx, "agent0")
			if err != nil || !again.Again || again.Seq != d.Seq {
				t.Fatalf("second delete: %+v, %v; want the same tombstone again", again, err)
			}

			rebuilt := openCounter(t, s, eventlog.Config{})
			waitAll(t, rebuilt)
			if got := dump(t, rebuilt, "counter"); !equalMaps(got, want) {
				t.Fatalf("rebuilt after delete:\n%v\nwant\n%v", got, want)
			}

			// The id again: a new agent, from nothing.
			for range 4 {
				if _, err := lg.Append(ctx, eventlog.Event{Agent: "agent0", Type: "tick", Data: []byte(`"new"`)}); err != nil {
					t.Fatal(err)
				}
			}
			waitAll(t, lg)
			waitAll(t, rebuilt)
			live, reb := dump(t, lg, "counter"), dump(t, rebuilt, "counter")
			if !equalMaps(live, reb) || live["n/agent0"] != "4" {
				t.Fatalf("the id reused: live n=%s, rebuilt n=%s (equal %v); want 4", live["n/agent0"], reb["n/agent0"], equalMaps(live, reb))
			}
		})
	}
}

// TestTombstoneSupersedesLeftovers: events stored before an agent's
// tombstone (a delete that crashed before its purge, or a purge a crash
// undid) never come back in a view rebuilt from the log.
func TestTombstoneSupersedesLeftovers(t *testing.T) {
	ctx := t.Context()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := openCounter(t, s, eventlog.Config{})
	appendN(t, lg, 300, 3)
	ev, err := eventlog.NewEvent("agent2", eventlog.TypeDeleted, eventlog.Tombstone{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lg.Append(ctx, ev); err != nil {
		t.Fatal(err)
	}
	appendN(t, lg, 3, 3) // one more event each: agent2 starts again
	waitAll(t, lg)
	rebuilt := openCounter(t, s, eventlog.Config{})
	waitAll(t, rebuilt)
	live, reb := dump(t, lg, "counter"), dump(t, rebuilt, "counter")
	if !equalMaps(live, reb) || live["n/agent2"] != "1" || live["n/agent1"] != "101" {
		t.Fatalf("live %v\nrebuilt %v\nwant agent2 counted from its tombstone (1), agent1 whole (101)", live, reb)
	}
}

// TestDeleteNothing: an agent with nothing stored is ErrNothingToDelete.
func TestDeleteNothing(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := openCounter(t, s, eventlog.Config{})
	if _, err := lg.Delete(t.Context(), "nobody"); !errors.Is(err, eventlog.ErrNothingToDelete) {
		t.Fatalf("delete nobody: %v, want ErrNothingToDelete", err)
	}
	if _, err := lg.Delete(t.Context(), "a.b"); !errors.Is(err, eventlog.ErrInvalid) {
		t.Fatalf("delete a.b: %v, want ErrInvalid", err)
	}
}
