package replay_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/forever-agents/forever/replay"
)

// liveEnv is a writer's process and a follower's, each with its own
// connection, Log and chunk.Live, on one server; creates counts the
// JetStream consumers created.
type liveEnv struct {
	s       *server.Server
	lg      *eventlog.Log // the writer's
	b       *eventlog.Batcher
	wnc     *nats.Conn // the writer's Live's connection
	wlive   *chunk.Live
	client  *replay.Client       // the follower's, WithLive
	reg     *prometheus.Registry // the follower's metrics
	creates atomic.Int32
}

func newLiveEnv(t *testing.T) *liveEnv {
	t.Helper()
	e := &liveEnv{s: eventlogtest.RunServer(t, eventlogtest.ServerOptions{}), reg: prometheus.NewRegistry()}
	e.lg = eventlogtest.OpenOn(t, e.s, eventlog.Config{})
	e.b, _ = runBatcher(t, e.lg)
	e.wnc = eventlogtest.Connect(t, e.s)
	var err error
	if e.wlive, err = chunk.NewLive(e.wnc, e.lg.Prefix(), nil); err != nil {
		t.Fatal(err)
	}
	fnc := eventlogtest.Connect(t, e.s)
	flive, err := chunk.NewLive(fnc, e.lg.Prefix(), nil)
	if err != nil {
		t.Fatal(err)
	}
	e.client = replay.NewClient(eventlogtest.OpenOn(t, e.s, eventlog.Config{Bind: true, Conn: fnc}), replay.WithLive(flive, e.reg))
	sub, err := fnc.Subscribe("$JS.API.CONSUMER.CREATE.>", func(*nats.Msg) { e.creates.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := fnc.Flush(); err != nil {
		t.Fatal(err)
	}
	return e
}

// follow ranges over a follow in a goroutine; the channel gets its items
// (the follow's first error ends it). each, when not nil, runs after each
// item is taken.
func follow(t *testing.T, it func(func(replay.Item, error) bool), each func()) <-chan []replay.Item {
	done := make(chan []replay.Item, 1)
	go func() {
		var out []replay.Item
		for item, err := range it {
			if err != nil {
				t.Errorf("follow: %v", err)
				break
			}
			out = append(out, item)
			if each != nil {
				each()
			}
		}
		done <- out
	}()
	return done
}

// checkOnceInOrder fails unless got is the stream's chunks with the text
// deltas "0".."n-1" between a start and a finish, each once, cursors
// increasing.
func checkOnceInOrder(t *testing.T, got []replay.Item, n int) {
	t.Helper()
	if len(got) != n+2 {
		t.Fatalf("got %d chunks, want %d", len(got), n+2)
	}
	for i, it := range got {
		if i > 0 && it.Cursor.Compare(got[i-1].Cursor) <= 0 {
			t.Fatalf("cursor %s after %s", it.Cursor, got[i-1].Cursor)
		}
		switch {
		case i == 0 && it.Chunk.Type != chunk.Start, i == n+1 && it.Chunk.Type != chunk.Finish:
			t.Fatalf("chunk %d is %s", i, it.Chunk.Type)
		case i > 0 && i <= n && it.Chunk.Delta != fmt.Sprint(i-1):
			t.Fatalf("chunk %d is %q, want %q", i, it.Chunk.Delta, fmt.Sprint(i-1))
		}
	}
}

func deltas(from, to int) []chunk.Chunk {
	var out []chunk.Chunk
	for i := from; i < to; i++ {
		out = append(out, chunk.Chunk{Type: chunk.TextDelta, ID: "t", Delta: fmt.Sprint(i)})
	}
	return out
}

// A follow of a running turn whose writer publishes live (chunk.Live)
// yields every chunk once, in order, with the cursors a stored read
// gives, and creates no JetStream consumer.
func TestLiveFollowCreatesNoConsumer(t *testing.T) {
	e := newLiveEnv(t)
	w := chunk.NewWriter(e.b, "a1", "s1", 0, e.lg.MaxPayload(), chunk.PublishLive(e.wlive))
	writeAll(t, w, chunk.Chunk{Type: chunk.Start, MessageID: "m1"})
	done := follow(t, e.client.FollowTurn(t.Context(), "a1", "s1", replay.Cursor{}), nil)
	for i := range 50 {
		writeAll(t, w, deltas(i, i+1)...)
	}
	writeAll(t, w, chunk.Chunk{Type: chunk.Finish})
	got := <-done
	checkOnceInOrder(t, got, 50)
	stored := collect(t, replay.NewClient(e.lg).Follow(t.Context(), "a1", "s1", replay.Cursor{}))
	for i := range stored {
		if stored[i].Cursor != got[i].Cursor {
			t.Fatalf("chunk %d: live cursor %s, stored %s", i, got[i].Cursor, stored[i].Cursor)
		}
	}
	if n := e.creates.Load(); n != 0 {
		t.Fatalf("a live follow created %d consumers, want none", n)
	}
}

// The writer's process dies mid-turn (its connection closed: no more live
// chunks from it) and the agent's new owner writes the rest of the stream:
// the follow still yields every chunk once and in order. First with the
// new owner publishing live (its first chunk's predecessor unknown to it:
// read from the log), then with the new owner not publishing (the follow's
// idle reads of the log find its chunks).
func TestLiveFollowAcrossWriterDeath(t *testing.T) {
	for _, newOwnerLive := range []bool{true, false} {
		t.Run(fmt.Sprintf("new owner live %v", newOwnerLive), func(t *testing.T) {
			e := newLiveEnv(t)
			replay.SetLiveTimes(e.client, 50*time.Millisecond, 200*time.Millisecond)
			w := chunk.NewWriter(e.b, "a1", "s1", 0, e.lg.MaxPayload(), chunk.PublishLive(e.wlive))
			writeAll(t, w, chunk.Chunk{Type: chunk.Start, MessageID: "m1"})
			var seen atomic.Int32
			done := follow(t, e.client.FollowTurn(t.Context(), "a1", "s1", replay.Cursor{}), func() { seen.Add(1) })
			writeAll(t, w, deltas(0, 10)...)
			waitfor.True(t, "the follow to yield the first owner's chunks", func() bool { return seen.Load() == 11 })
			e.wnc.Close() // the owner is gone

			lg2 := eventlogtest.OpenOn(t, e.s, eventlog.Config{})
			b2, _ := runBatcher(t, lg2)
			var opts []chunk.WriterOption
			if newOwnerLive {
				live2, err := chunk.NewLive(eventlogtest.Connect(t, e.s), lg2.Prefix(), nil)
				if err != nil {
					t.Fatal(err)
				}
				opts = append(opts, chunk.PublishLive(live2))
			}
			w2 := chunk.NewWriter(b2, "a1", "s1", 11, lg2.MaxPayload(), opts...)
			writeAll(t, w2, deltas(10, 20)...)
			writeAll(t, w2, chunk.Chunk{Type: chunk.Finish})
			checkOnceInOrder(t, <-done, 20)
		})
	}
}

// A stream whose writer does not publish live (a node of an earlier
// release) is followed all the same: the follow's first idle read finds
// chunks no live event announced, and a consumer goes on.
func TestLiveFollowOfUnpublishedStream(t *testing.T) {
	e := newLiveEnv(t)
	replay.SetLiveTimes(e.client, 50*time.Millisecond, 200*time.Millisecond)
	w := chunk.NewWriter(e.b, "a1", "s1", 0, e.lg.MaxPayload())
	writeAll(t, w, chunk.Chunk{Type: chunk.Start, MessageID: "m1"})
	var seen atomic.Int32
	done := follow(t, e.client.FollowTurn(t.Context(), "a1", "s1", replay.Cursor{}), func() { seen.Add(1) })
	waitfor.True(t, "the follow's first chunk", func() bool { return seen.Load() == 1 })
	writeAll(t, w, deltas(0, 10)...)
	waitfor.True(t, "the follow to go on with a consumer", func() bool {
		return fallbacks(t, e.reg, "unpublished") == 1 && e.creates.Load() > 0
	})
	writeAll(t, w, deltas(10, 20)...)
	writeAll(t, w, chunk.Chunk{Type: chunk.Finish})
	checkOnceInOrder(t, <-done, 20)
}

// A follower that does not read holds nothing back: the writer's chunks
// are all stored while it sleeps, past its live buffer (the messages over
// it are dropped), and once it reads again it yields every chunk once and
// in order, reading what it missed from the log.
func TestLiveSlowFollowerDoesNotBlockWriter(t *testing.T) {
	e := newLiveEnv(t)
	w := chunk.NewWriter(e.b, "a1", "s1", 0, e.lg.MaxPayload(), chunk.PublishLive(e.wlive))
	writeAll(t, w, chunk.Chunk{Type: chunk.Start, MessageID: "m1"})
	release := make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var first atomic.Bool
	done := follow(t, e.client.FollowTurn(ctx, "a1", "s1", replay.Cursor{}), func() {
		if first.CompareAndSwap(false, true) {
			<-release // the follower stops reading
		}
	})
	waitfor.True(t, "the follow's first chunk", first.Load)
	const n = 1200 // over the follower's live buffer of 1,024 messages
	for i := 0; i < n; i += 400 {
		writeAll(t, w, deltas(i, i+400)...) // returns once stored: nothing waits for the follower
	}
	writeAll(t, w, chunk.Chunk{Type: chunk.Finish})
	close(release)
	checkOnceInOrder(t, <-done, n)
}

// fallbacks is the follower's forever_replay_live_fallbacks_total{why}.
func fallbacks(t *testing.T, reg *prometheus.Registry, why string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "forever_replay_live_fallbacks_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "why" && l.GetValue() == why {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
