package eventlog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/ownership"
	"github.com/nats-io/nats.go/jetstream"
)

// shardCounts are the shard counts the shard tests run with, each over 8
// partitions.
var shardCounts = []int{2, 4}

// agentsOverShards returns n agent ids and checks they fall into every
// shard of a log with k shards over p partitions.
func agentsOverShards(t *testing.T, n, p, k int) []string {
	t.Helper()
	seen := map[int]bool{}
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("agent%d", i)
		seen[eventlog.PartitionOf(out[i], p)%k] = true
	}
	if len(seen) != k {
		t.Fatalf("%d agents cover shards %v of %d", n, seen, k)
	}
	return out
}

// The partition a sharded log places an agent by is the one its lease is
// for.
func TestPartitionOfIsOwnerships(t *testing.T) {
	for i := range 1000 {
		a := "agent-" + strconv.Itoa(i)
		for _, n := range []int{1, 7, 64} {
			if got, want := eventlog.PartitionOf(a, n), ownership.PartitionOf(a, n); got != want {
				t.Fatalf("PartitionOf(%q, %d) = %d, ownership's %d", a, n, got, want)
			}
		}
	}
}

func TestShardsConfig(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	for _, tc := range []struct {
		name         string
		shards, part int
	}{
		{"negative", -1, 8},
		{"not a divisor", 3, 8},
		{"no partitions", 2, 0},
		{"too many", eventlog.MaxShards + 1, 2 * eventlog.MaxShards},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := eventlog.Open(t.Context(), eventlog.Config{Conn: eventlogtest.Connect(t, s), Shards: tc.shards, Partitions: tc.part})
			if err == nil {
				t.Fatal("opened")
			}
		})
	}
}

// Each shard is its own stream, holding the partitions p mod K = k, and an
// agent's events and chunks land in its shard, on subjects with its
// partition; a Seq names the shard; reads, last sequences and direct gets
// of one agent see its events only.
func TestShardsAppendRead(t *testing.T) {
	for _, k := range shardCounts {
		t.Run(strconv.Itoa(k), func(t *testing.T) {
			ctx := t.Context()
			lg, s := eventlogtest.Open(t, eventlog.Config{Shards: k, Partitions: 8})
			if got := lg.EventsStreams(); len(got) != k || got[1] != "FOREVER_EVENTS_1" {
				t.Fatalf("EventsStreams = %v", got)
			}
			agents := agentsOverShards(t, 16, 8, k)
			for round := range 3 {
				for _, a := range agents {
					seq, err := lg.Append(ctx, eventlog.Event{Agent: a, Type: "note.added", Data: json.RawMessage(strconv.Itoa(round))})
					if err != nil {
						t.Fatal(err)
					}
					shard, _ := eventlog.ShardOf(seq)
					if want := eventlog.PartitionOf(a, 8) % k; shard != want {
						t.Fatalf("seq %d of %s names shard %d, want %d", seq, a, shard, want)
					}
					if _, err := lg.Append(ctx, eventlog.Event{Agent: a, Stream: "s1", Type: "chunk", Data: json.RawMessage(`{}`)}); err != nil {
						t.Fatal(err)
					}
				}
			}
			js, _ := jetstream.New(eventlogtest.Connect(t, s))
			total := 0
			for i, name := range lg.EventsStreams() {
				st, err := js.Stream(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
				if err != nil {
					t.Fatal(err)
				}
				for subj := range info.State.Subjects {
					var p int
					var a string
					if _, err := fmt.Sscanf(subj, "forever.evt.%d.%s", &p, &a); err != nil || p%k != i || eventlog.PartitionOf(a, 8) != p {
						t.Errorf("stream %s holds subject %s", name, subj)
					}
				}
				total += int(info.State.Msgs)
			}
			if total != 3*len(agents) {
				t.Errorf("events stored over the shards = %d, want %d", total, 3*len(agents))
			}
			for _, a := range agents {
				evs, err := lg.Read(ctx, eventlog.Filter{Agent: a}, 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(evs) != 3 || evs[0].Agent != a || evs[2].Seq <= evs[0].Seq {
					t.Fatalf("Read(%s) = %v", a, evs)
				}
				last, err := lg.LastSeq(ctx, eventlog.Filter{Agent: a})
				if err != nil || last != evs[2].Seq {
					t.Fatalf("LastSeq(%s) = %d, %v; want %d", a, last, err, evs[2].Seq)
				}
				e, ok, err := lg.Next(ctx, eventlog.Filter{Agent: a}, evs[0].Seq)
				if err != nil || !ok || e.Seq != evs[1].Seq {
					t.Fatalf("Next(%s, %d) = %d, %v, %v; want %d", a, evs[0].Seq, e.Seq, ok, err, evs[1].Seq)
				}
				chunks, err := lg.Read(ctx, eventlog.Filter{Agent: a, Stream: "s1"}, 0, 0)
				if err != nil || len(chunks) != 3 {
					t.Fatalf("chunks of %s: %d, %v", a, len(chunks), err)
				}
				// A replay from a chunk's cursor sees the rest, once.
				n := 0
				fctx, cancel := context.WithCancel(ctx)
				for c, err := range lg.Follow(fctx, eventlog.Filter{Agent: a, Stream: "s1"}, chunks[0].Seq) {
					if err != nil {
						t.Fatal(err)
					}
					if c.Seq != chunks[1+n].Seq {
						t.Fatalf("follow after %d: got %d, want %d", chunks[0].Seq, c.Seq, chunks[1+n].Seq)
					}
					if n++; n == 2 {
						break
					}
				}
				cancel()
			}
			// The whole log, read in pages, is every event once.
			last, err := lg.LastSeq(ctx, eventlog.Filter{})
			if err != nil || last != eventlog.SeqEnds {
				t.Fatalf("LastSeq of the whole log = %d, %v", last, err)
			}
			var all []eventlog.Seq
			for after := eventlog.Seq(0); ; {
				evs, err := lg.Read(ctx, eventlog.Filter{}, after, 5)
				if err != nil {
					t.Fatal(err)
				}
				if len(evs) == 0 {
					break
				}
				for _, e := range evs {
					all = append(all, e.Seq)
					after = e.Seq
				}
			}
			if len(all) != 3*len(agents) || !slices.IsSorted(all) || len(slices.Compact(slices.Clone(all))) != len(all) {
				t.Errorf("whole log read: %d events (sorted %v), want %d once each", len(all), slices.IsSorted(all), 3*len(agents))
			}
			for _, err := range lg.Follow(ctx, eventlog.Filter{}, 0) {
				if !errors.Is(err, eventlog.ErrInvalid) {
					t.Errorf("Follow of every shard: %v, want ErrInvalid", err)
				}
				break
			}
		})
	}
}

// Fencing holds per shard: an agent's expected last sequence is its
// subject's in its shard, a stale owner is fenced, and a compare-and-set
// with a Seq of the agent's shard works.
func TestShardsFence(t *testing.T) {
	for _, k := range shardCounts {
		t.Run(strconv.Itoa(k), func(t *testing.T) {
			ctx := t.Context()
			s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
			own := []*grants{{}, {}}
			lgs := make([]*eventlog.Log, 2)
			for i := range lgs {
				lgs[i] = eventlogtest.OpenOn(t, s, eventlog.Config{Shards: k, Partitions: 8, Owner: own[i]})
			}
			for _, a := range agentsOverShards(t, 8, 8, k) {
				own[0].set(a, eventlog.Token{Node: "a", Epoch: 1})
				seq, err := appendNote(ctx, lgs[0], a)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := appendNote(ctx, lgs[0], a, eventlog.ExpectSeq(seq)); err != nil {
					t.Fatalf("%s: expect %d: %v", a, seq, err)
				}
				if _, err := appendNote(ctx, lgs[0], a, eventlog.ExpectSeq(seq)); !errors.Is(err, eventlog.ErrConflict) {
					t.Fatalf("%s: stale expect: %v, want ErrConflict", a, err)
				}
				own[1].set(a, eventlog.Token{Node: "b", Epoch: 2})
				if _, err := appendNote(ctx, lgs[1], a); err != nil {
					t.Fatalf("%s: new owner: %v", a, err)
				}
				if _, err := appendNote(ctx, lgs[0], a); !errors.Is(err, eventlog.ErrFenced) {
					t.Fatalf("%s: stale owner: %v, want ErrFenced", a, err)
				}
				if err := eventlog.CheckWriters(mustRead(t, lgs[1], a)); err != nil {
					t.Fatalf("%s: %v", a, err)
				}
			}
		})
	}
}

func mustRead(t *testing.T, lg *eventlog.Log, agent string) []eventlog.Event {
	t.Helper()
	evs, err := lg.Read(t.Context(), eventlog.Filter{Agent: agent}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// The views follow every shard: each view is the fold of every agent's
// events, WaitFor of an append's Seq waits for its shard, WaitFor(SeqEnds)
// for all, and a restart resumes each shard from its own cursor: nothing
// applied twice, nothing missed.
func TestShardsViews(t *testing.T) {
	for _, k := range shardCounts {
		t.Run(strconv.Itoa(k), func(t *testing.T) {
			ctx := t.Context()
			s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
			dir := t.TempDir()
			cfg := eventlog.Config{Shards: k, Partitions: 8, Dir: dir}
			lg := eventlogtest.OpenOn(t, s, cfg)
			agents := agentsOverShards(t, 12, 8, k)
			appendEach := func(lg *eventlog.Log, round int) eventlog.Seq {
				var last eventlog.Seq
				for _, a := range agents {
					seq, err := lg.Append(ctx, eventlog.Event{Agent: a, Type: "tick", Data: json.RawMessage(strconv.Itoa(round))})
					if err != nil {
						t.Fatal(err)
					}
					last = seq
				}
				return last
			}
			appendEach(lg, 0)
			p := counter(1)
			f := newFollower(t, lg, p)
			fctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- f.Run(fctx) }()
			<-f.Ready()
			if err := f.WaitFor(ctx, eventlog.SeqEnds); err != nil {
				t.Fatal(err)
			}
			checkFold(t, lg, p.Name)
			// Read-your-writes of one append, in any shard.
			for _, a := range agents {
				seq, err := lg.Append(ctx, eventlog.Event{Agent: a, Type: "tick", Data: json.RawMessage(`1`)})
				if err != nil {
					t.Fatal(err)
				}
				if err := f.WaitFor(ctx, seq); err != nil {
					t.Fatal(err)
				}
				if got := dump(t, lg, p.Name)["n/"+a]; got != "2" {
					t.Fatalf("after WaitFor(%d), %s counts %q, want 2", seq, a, got)
				}
			}
			stop()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			// Appended while no follower runs, then a new follower over the
			// same Pebble (a restart) resumes every shard from its cursor.
			appendEach(lg, 2)
			lg.Close()
			lg = eventlogtest.OpenOn(t, s, cfg)
			var applied atomic.Int64
			counted := p
			counted.Apply = func(b *eventlog.Batch, e eventlog.Event) error {
				applied.Add(1)
				return p.Apply(b, e)
			}
			f = newFollower(t, lg, counted)
			eventlogtest.RunFollower(t, f)
			appendEach(lg, 3)
			if err := f.WaitFor(ctx, eventlog.SeqEnds); err != nil {
				t.Fatal(err)
			}
			checkFold(t, lg, p.Name)
			// Resumed, not rebuilt: only the events after the cursors.
			if got, want := applied.Load(), int64(2*len(agents)); got != want {
				t.Errorf("after the restart the view applied %d events, want the %d appended since", got, want)
			}
			for _, a := range agents {
				if got := dump(t, lg, p.Name)["n/"+a]; got != "4" {
					t.Errorf("%s counts %q, want 4", a, got)
				}
			}
			// A rebuild replays every shard.
			if err := f.Rebuild(ctx, p.Name); err != nil {
				t.Fatal(err)
			}
			if err := f.WaitFor(ctx, eventlog.SeqEnds); err != nil {
				t.Fatal(err)
			}
			checkFold(t, lg, p.Name)
		})
	}
}

// checkFold checks that view name is the fold of every agent's events,
// each agent's read from its shard.
func checkFold(t *testing.T, lg *eventlog.Log, name string) {
	t.Helper()
	var evs []eventlog.Event
	for after := eventlog.Seq(0); ; {
		page, err := lg.Read(t.Context(), eventlog.Filter{}, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		evs = append(evs, page...)
		after = page[len(page)-1].Seq
	}
	if got, want := dump(t, lg, name), fold(evs); !equalMaps(got, want) {
		t.Fatalf("view %s = %v, want %v", name, got, want)
	}
}

// Views catch up over the shards while writers append to all of them at
// once: the view ends as the fold of the log.
func TestShardsViewsUnderLoad(t *testing.T) {
	ctx := t.Context()
	lg, _ := eventlogtest.Open(t, eventlog.Config{Shards: 4, Partitions: 8})
	p := counter(1)
	f := newFollower(t, lg, p)
	eventlogtest.RunFollower(t, f)
	agents := agentsOverShards(t, 16, 8, 4)
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Go(func() {
			for i := range 20 {
				if _, err := lg.Append(ctx, eventlog.Event{Agent: a, Type: "tick", Data: json.RawMessage(strconv.Itoa(i))}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := f.WaitFor(ctx, eventlog.SeqEnds); err != nil {
		t.Fatal(err)
	}
	checkFold(t, lg, p.Name)
}

// Deleting an agent and compacting it purge in its shard only.
func TestShardsDelete(t *testing.T) {
	ctx := t.Context()
	lg, _ := eventlogtest.Open(t, eventlog.Config{Shards: 2, Partitions: 8})
	agents := agentsOverShards(t, 8, 8, 2)
	for _, a := range agents {
		for range 3 {
			if _, err := appendNote(ctx, lg, a); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := lg.Append(ctx, eventlog.Event{Agent: a, Stream: "s1", Type: "chunk", Data: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	gone := agents[0]
	if _, err := lg.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	evs := mustRead(t, lg, gone)
	if len(evs) != 1 || evs[0].Type != eventlog.TypeDeleted {
		t.Fatalf("deleted agent's events: %v", evs)
	}
	for _, a := range agents[1:] {
		if n := len(mustRead(t, lg, a)); n != 3 {
			t.Errorf("%s has %d events after %s was deleted, want 3", a, n, gone)
		}
		chunks, err := lg.Read(ctx, eventlog.Filter{Agent: a, Stream: "s1"}, 0, 0)
		if err != nil || len(chunks) != 1 {
			t.Errorf("%s's chunks: %d, %v", a, len(chunks), err)
		}
	}
	if err := lg.PurgeChunks(ctx, agents[1], "s1"); err != nil {
		t.Fatal(err)
	}
	if chunks, err := lg.Read(ctx, eventlog.Filter{Agent: agents[1], Stream: "s1"}, 0, 0); err != nil || len(chunks) != 0 {
		t.Errorf("purged chunks: %d, %v", len(chunks), err)
	}
}

// A client binding to a sharded log's streams learns the layout from
// them.
func TestShardsBind(t *testing.T) {
	ctx := t.Context()
	lg, s := eventlogtest.Open(t, eventlog.Config{Shards: 4, Partitions: 8})
	a := "agent7"
	seq, err := appendNote(ctx, lg, a)
	if err != nil {
		t.Fatal(err)
	}
	for _, chunksOnly := range []bool{false, true} {
		c, err := eventlog.Open(ctx, eventlog.Config{Conn: eventlogtest.Connect(t, s), Bind: true, ChunksOnly: chunksOnly})
		if err != nil {
			t.Fatal(err)
		}
		if c.Shards() != 4 || c.Partitions() != 8 {
			t.Fatalf("bound client: %d shards, %d partitions", c.Shards(), c.Partitions())
		}
		if !chunksOnly {
			if last, err := c.LastSeq(ctx, eventlog.Filter{Agent: a}); err != nil || last != seq {
				t.Fatalf("bound client's LastSeq = %d, %v; want %d", last, err, seq)
			}
		}
		c.Close()
	}
}

// A view's row over every agent (a total) stays the sum of the agents'
// rows when their events come from several shards, through a compaction
// and a deletion, live and rebuilt: the shards' commits take turns.
func TestShardsRowsChangedKeepsTotals(t *testing.T) {
	ctx := t.Context()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	cfg := eventlog.Config{Shards: 4, Partitions: 8}
	open := func() (*eventlog.Log, *eventlog.Projector) {
		lg := eventlogtest.OpenOn(t, s, cfg)
		pr, err := lg.NewProjector(totalled())
		if err != nil {
			t.Fatal(err)
		}
		eventlogtest.RunProjector(t, pr)
		return lg, pr
	}
	check := func(lg *eventlog.Log, pr *eventlog.Projector, want int, when string) {
		t.Helper()
		if err := pr.WaitFor(ctx, eventlog.SeqEnds); err != nil {
			t.Fatal(err)
		}
		rows := dump(t, lg, "totalled")
		sum := 0
		for k, v := range rows {
			if len(k) > 2 && k[:2] == "n/" {
				n, _ := strconv.Atoi(v)
				sum += n
			}
		}
		if total, _ := strconv.Atoi(rows["total"]); total != sum || total != want {
			t.Fatalf("%s: total %d, the agents' counts sum to %d, want %d", when, total, sum, want)
		}
	}
	lg, pr := open()
	agents := agentsOverShards(t, 8, 8, 4)
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Go(func() {
			for i := range 25 {
				if _, err := lg.Append(ctx, eventlog.Event{Agent: a, Type: "tick", Data: json.RawMessage(strconv.Itoa(i))}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	check(lg, pr, 200, "live")
	if _, err := lg.Compact(ctx, agents[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := lg.Append(ctx, eventlog.Event{Agent: agents[0], Type: "tick", Data: []byte(`"more"`)}); err != nil {
		t.Fatal(err)
	}
	check(lg, pr, 201, "after a compaction")
	if _, err := lg.Delete(ctx, agents[1]); err != nil {
		t.Fatal(err)
	}
	check(lg, pr, 176, "after a deletion")
	lg2, pr2 := open()
	check(lg2, pr2, 176, "rebuilt")
}
