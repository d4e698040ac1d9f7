package replay_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/forever-agents/forever/replay"
	"github.com/nats-io/nats.go"
)

func writeAll(t *testing.T, w *chunk.Writer, chunks ...chunk.Chunk) eventlog.Seq {
	t.Helper()
	for _, c := range chunks {
		if err := w.Write(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	seq, err := w.Flush(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

func collect(t *testing.T, it func(func(replay.Item, error) bool)) []replay.Item {
	t.Helper()
	var out []replay.Item
	for item, err := range it {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, item)
	}
	return out
}

func TestFollowCompletedStreamReplaysAndEnds(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{MaxPayload: 64 << 10})
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{})
	b, _ := runBatcher(t, lg)
	w := chunk.NewWriter(b, "a1", "s1", 0, lg.MaxPayload())
	big := strings.Repeat("x", 150<<10)
	chunks := []chunk.Chunk{
		{Type: chunk.Start, MessageID: "m1"},
		{Type: chunk.TextDelta, ID: "t", Delta: "a"},
		{Type: chunk.TextDelta, ID: "t", Delta: big},
		{Type: chunk.Finish},
	}
	writeAll(t, w, chunks...)
	// Another stream of the same agent, interleaved after, must not show.
	writeAll(t, chunk.NewWriter(b, "a1", "s2", 0, lg.MaxPayload()), chunk.Chunk{Type: chunk.Start, MessageID: "m2"})

	client := replay.NewClient(eventlogtest.OpenOn(t, s, eventlog.Config{Bind: true}))
	got := collect(t, client.Follow(t.Context(), "a1", "s1", replay.Cursor{}))
	if len(got) != len(chunks) {
		t.Fatalf("got %d chunks, want %d", len(got), len(chunks))
	}
	for i := range got {
		if got[i].Chunk.Type != chunks[i].Type || got[i].Chunk.Delta != chunks[i].Delta {
			t.Fatalf("chunk %d = %+v", i, got[i].Chunk.Type)
		}
		if i > 0 && got[i].Cursor.Compare(got[i-1].Cursor) <= 0 {
			t.Fatalf("cursors not increasing: %v after %v", got[i].Cursor, got[i-1].Cursor)
		}
	}
	// From the middle: the tail only.
	tail := collect(t, client.Follow(t.Context(), "a1", "s1", got[1].Cursor))
	if len(tail) != 2 || tail[0].Chunk.Delta != big || tail[1].Chunk.Type != chunk.Finish {
		t.Fatalf("tail = %d chunks", len(tail))
	}
	// From inside the split chunk: skips to the next whole chunk.
	mid := collect(t, client.Follow(t.Context(), "a1", "s1", replay.CursorAt(got[1].Cursor.Seq()+1)))
	if len(mid) != 1 || mid[0].Chunk.Type != chunk.Finish {
		t.Fatalf("from inside a split chunk: %d chunks", len(mid))
	}
	// At the end: nothing, and it ends.
	if end := collect(t, client.Follow(t.Context(), "a1", "s1", got[3].Cursor)); len(end) != 0 {
		t.Fatalf("after the terminal chunk: %d chunks", len(end))
	}
	// Unknown stream.
	for _, err := range client.Follow(t.Context(), "a1", "nope", replay.Cursor{}) {
		if !errors.Is(err, replay.ErrUnknownStream) {
			t.Fatalf("unknown stream: err = %v", err)
		}
	}
	// Latest, from the log alone.
	if got, err := client.Latest(t.Context(), "a1"); err != nil || got != "s2" {
		t.Fatalf("Latest = %q, %v; want s2", got, err)
	}
	if _, err := client.Latest(t.Context(), "nobody"); !errors.Is(err, replay.ErrUnknownStream) {
		t.Fatalf("Latest of an agent without streams: %v", err)
	}
}

// chunkN is the i-th chunk of the property test's stream: every 17th is
// larger than the server's max payload, so it is stored in parts.
func chunkN(i, n int) chunk.Chunk {
	switch {
	case i == 0:
		return chunk.Chunk{Type: chunk.Start, MessageID: "m"}
	case i == n-1:
		return chunk.Chunk{Type: chunk.Finish}
	case i%17 == 5:
		return chunk.Chunk{Type: chunk.TextDelta, ID: "t", Delta: strconv.Itoa(i) + ":" + strings.Repeat("é", 50<<10)}
	default:
		return chunk.Chunk{Type: chunk.TextDelta, ID: "t", Delta: strconv.Itoa(i) + ":"}
	}
}

func indexOf(t *testing.T, c chunk.Chunk, n int) int {
	switch c.Type {
	case chunk.Start:
		return 0
	case chunk.Finish:
		return n - 1
	}
	s, _, ok := strings.Cut(c.Delta, ":")
	i, err := strconv.Atoi(s)
	if !ok || err != nil {
		t.Errorf("chunk %+v has no index", c.Type)
		return -1
	}
	if want := chunkN(i, n); want.Delta != c.Delta {
		t.Errorf("chunk %d delta differs (%d bytes, want %d)", i, len(c.Delta), len(want.Delta))
	}
	return i
}

// Property: while a writer publishes a stream, readers that disconnect at
// random points (stop ranging, or cancel mid-wait) and resume from their
// last cursor see every chunk exactly once, in order, with no gap, history
// and live alike; also across a writer restart (Log and Batcher closed and
// reopened on the same server mid-stream).
func TestFollowResumeExactlyOnce(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			const n, readers = 240, 4
			s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{MaxPayload: 32 << 10})
			lg := eventlogtest.OpenOn(t, s, eventlog.Config{})
			client := replay.NewClient(eventlogtest.OpenOn(t, s, eventlog.Config{Bind: true}))
			// The first chunk exists before readers start (Follow needs it).
			b, stopB := runBatcher(t, lg)
			w := chunk.NewWriter(b, "a", "s", 0, lg.MaxPayload())
			writeAll(t, w, chunkN(0, n))

			var wg sync.WaitGroup
			results := make([][]int, readers)
			resumes := make([]int, readers)
			for r := range readers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(r), 7))
					var cursor replay.Cursor
					for done := false; !done; {
						resumes[r]++
						ctx, cancel := context.WithCancel(t.Context())
						if rng.IntN(2) == 0 {
							// Disconnect by time, possibly while waiting for live chunks.
							time.AfterFunc(time.Duration(rng.IntN(20))*time.Millisecond, cancel)
						}
						stopAfter := 1 + rng.IntN(30)
						k := 0
						for it, err := range client.Follow(ctx, "a", "s", cursor) {
							if err != nil {
								if ctx.Err() == nil {
									t.Errorf("reader %d: %v", r, err)
									done = true
								}
								break
							}
							if it.Cursor.Compare(cursor) <= 0 {
								t.Errorf("reader %d: cursor %v not after %v", r, it.Cursor, cursor)
							}
							cursor = it.Cursor
							results[r] = append(results[r], indexOf(t, it.Chunk, n))
							if it.Chunk.Terminal() {
								done = true
								break
							}
							if k++; k >= stopAfter {
								break
							}
						}
						cancel()
						if resumes[r] > 10*n {
							t.Errorf("reader %d: no end after %d resumes", r, resumes[r])
							return
						}
					}
				}()
			}

			rng := rand.New(rand.NewPCG(1, 2))
			for i := 1; i < n; i++ {
				if restart && i == n/2 {
					if _, err := w.Flush(t.Context()); err != nil {
						t.Fatal(err)
					}
					next := w.Written()
					stopB()
					lg.Close()
					lg = eventlogtest.OpenOn(t, s, eventlog.Config{})
					b, stopB = runBatcher(t, lg)
					w = chunk.NewWriter(b, "a", "s", next, lg.MaxPayload())
				}
				if err := w.Write(t.Context(), chunkN(i, n)); err != nil {
					t.Fatal(err)
				}
				if rng.IntN(10) == 0 {
					if _, err := w.Flush(t.Context()); err != nil {
						t.Fatal(err)
					}
					time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond) // not a synchronisation: a random pace
				}
			}
			if _, err := w.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			for r, got := range results {
				if len(got) != n {
					t.Errorf("reader %d saw %d chunks, want %d", r, len(got), n)
				}
				for i, idx := range got {
					if idx != i {
						t.Fatalf("reader %d: position %d holds chunk %d (dup or gap)", r, i, idx)
					}
				}
				t.Logf("reader %d: %d follows", r, resumes[r])
			}
		})
	}
}

// A follow that finds the stream stored to its terminal chunk reads it with
// direct gets and creates no consumer; one that must wait for live chunks
// creates one (the count below can fail).
func TestFollowOfStoredStreamCreatesNoConsumer(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{})
	b, _ := runBatcher(t, lg)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var creates atomic.Int32
	sub, err := nc.Subscribe("$JS.API.CONSUMER.CREATE.>", func(*nats.Msg) { creates.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	writeAll(t, chunk.NewWriter(b, "a1", "s1", 0, lg.MaxPayload()),
		chunk.Chunk{Type: chunk.Start, MessageID: "m1"}, chunk.Chunk{Type: chunk.TextDelta, ID: "t", Delta: "a"}, chunk.Chunk{Type: chunk.Finish})
	client := replay.NewClient(eventlogtest.OpenOn(t, s, eventlog.Config{Bind: true}))
	if got := collect(t, client.Follow(t.Context(), "a1", "s1", replay.Cursor{})); len(got) != 3 {
		t.Fatalf("got %d chunks, want 3", len(got))
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := creates.Load(); n != 0 {
		t.Fatalf("following a stored stream created %d consumers, want none", n)
	}

	// A stream still being written: the follow waits on a consumer.
	w := chunk.NewWriter(b, "a1", "s2", 0, lg.MaxPayload())
	writeAll(t, w, chunk.Chunk{Type: chunk.Start, MessageID: "m2"})
	done := make(chan []replay.Item)
	go func() {
		var out []replay.Item
		for it, err := range client.Follow(t.Context(), "a1", "s2", replay.Cursor{}) {
			if err != nil {
				break
			}
			out = append(out, it)
		}
		done <- out
	}()
	waitfor.True(t, "the live follow's consumer", func() bool { return creates.Load() > 0 })
	writeAll(t, w, chunk.Chunk{Type: chunk.Finish})
	if got := <-done; len(got) != 2 {
		t.Fatalf("live follow: got %d chunks, want 2", len(got))
	}
}
