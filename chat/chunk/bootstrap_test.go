package chunk_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/nats-io/nats.go/jetstream"
)

// views is a streams view and its projector.
type views struct {
	pr      *eventlog.Projector
	streams *chunk.Streams
}

// openStreams registers p on lg, runs it and waits until it is ready.
func openStreams(t *testing.T, lg *eventlog.Log, p eventlog.Projection) views {
	t.Helper()
	pr, err := lg.NewProjector(p)
	if err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunProjector(t, pr)
	v, err := lg.View(p.Name)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-pr.Ready():
	case <-time.After(20 * time.Second):
		t.Fatalf("view %s not ready", p.Name)
	}
	return views{pr: pr, streams: chunk.NewStreams(v)}
}

// replayed is the streams projection without its bootstrap: a view built
// from nothing replays every chunk, as it did before.
func replayed() eventlog.Projection {
	p := chunk.StreamsProjection()
	p.Name, p.Bootstrap = "streamsreplay", nil
	return p
}

// sameViews checks that two streams views hold the same rows for agents:
// every stream, each agent's latest, and the ended index.
func sameViews(t *testing.T, lg *eventlog.Log, got, want views, agents ...string) {
	t.Helper()
	last, err := lg.LastSeq(t.Context(), eventlog.Filter{Chunks: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []views{got, want} {
		if err := v.pr.WaitFor(t.Context(), last); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range agents {
		g, err1 := got.streams.List(a)
		w, err2 := want.streams.List(a)
		if err1 != nil || err2 != nil || len(w) == 0 || !reflect.DeepEqual(g, w) {
			t.Fatalf("streams of %s (%v, %v):\n got %+v\nwant %+v", a, err1, err2, g, w)
		}
		gl, err1 := got.streams.Latest(a)
		wl, err2 := want.streams.Latest(a)
		if err1 != nil || err2 != nil || gl.Stream != wl.Stream {
			t.Fatalf("latest of %s: got %s (%v), want %s (%v)", a, gl.Stream, err1, wl.Stream, err2)
		}
	}
	ended := func(v views) []string {
		var out []string
		for info, err := range v.streams.Ended(time.Now().Add(1000 * time.Hour)) {
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, info.Agent+"/"+info.Stream)
		}
		return out
	}
	if g, w := ended(got), ended(want); !reflect.DeepEqual(g, w) {
		t.Fatalf("ended index: got %v, want %v", g, w)
	}
}

// TestStreamsBootstrapMatchesReplay: a streams view built from nothing
// reads each stream's first and last stored event (Log.Ends), not every
// chunk, and holds the rows a replay of every chunk gives: completed,
// failed (with its error) and aborted streams, one still streaming, split
// chunks in the middle and at the end, a one-chunk stream, a stream whose
// chunks retention purged (its marker alone), a stream with an event that
// does not decode, several agents' latest streams, and the ended index.
// Chunks written while and after it bootstraps are applied on top, each
// once. Readers of the view (replay's resume, retention, the gateway's
// Latest and Get, status) read these rows.
func TestStreamsBootstrapMatchesReplay(t *testing.T) {
	srv := eventlogtest.RunServer(t, eventlogtest.ServerOptions{MaxPayload: 64 << 10})
	lg := eventlogtest.OpenOn(t, srv, eventlog.Config{})
	live := openStreams(t, lg, chunk.StreamsProjection())
	e := &retentionEnv{lg: lg, b: runBatcher(t, lg), pr: live.pr, streams: live.streams}

	big := strings.Repeat("long text ", 10<<10) // ~100 KiB: split in parts
	e.write(t, "a1", "s1", finished...)
	e.write(t, "a1", "s2", chunk.Chunk{Type: chunk.Start, MessageID: "m2", RequestID: "r2"}, chunk.Chunk{Type: chunk.StartStep},
		chunk.Chunk{Type: chunk.Error, ErrorText: "the model failed"})
	e.write(t, "a1", "s3", chunk.Chunk{Type: chunk.Start, MessageID: "m3"}, chunk.Chunk{Type: chunk.TextDelta, ID: "t", Delta: big},
		chunk.Chunk{Type: chunk.Abort})
	e.write(t, "a2", "s4", started...)
	e.write(t, "a2", "s5", chunk.Chunk{Type: chunk.Start}, chunk.Chunk{Type: chunk.TextDelta, ID: "t", Delta: big})
	e.write(t, "a3", "s6", finished...)
	e.write(t, "a3", "s7", chunk.Chunk{Type: chunk.Start, MessageID: "m7", RequestID: "r7"})
	// a3/s6 ends long ago: retention purges it and leaves its marker.
	if n, err := e.sweeper(t, time.Now().Add(100*time.Hour), func(a string) bool { return a == "a3" }).Sweep(t.Context()); err != nil || n == 0 {
		t.Fatalf("sweep: %d, %v", n, err)
	}
	// A stored event that does not decode, between two chunks.
	e.write(t, "a4", "s8", chunk.Chunk{Type: chunk.Start})
	nc := eventlogtest.Connect(t, srv)
	if _, err := nc.Request(lg.Prefix()+".chunk.a4.s8", []byte("not an event"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	e.write(t, "a4", "s8", chunk.Chunk{Type: chunk.Finish})
	agents := []string{"a1", "a2", "a3", "a4"}

	// A process whose Pebble is empty: the bootstrapped view and, beside
	// it, one that replays every chunk.
	lg2 := eventlogtest.OpenOn(t, srv, eventlog.Config{})
	boot := openStreams(t, lg2, chunk.StreamsProjection())
	replay := openStreams(t, lg2, replayed())
	sameViews(t, lg2, boot, replay, agents...)
	sameViews(t, lg2, boot, live, agents...)
	if info, err := boot.streams.Get("a1", "s2"); err != nil || info.Status != chunk.StatusError || info.Error != "the model failed" || info.RequestID != "r2" {
		t.Fatalf("a1/s2 = %+v, %v", info, err)
	}
	if info, err := boot.streams.Get("a3", "s6"); err != nil || !info.Expired {
		t.Fatalf("a3/s6 = %+v, %v", info, err)
	}

	// Only the ends are read: chunks removed from the middle of a stream
	// (here deleted by hand) leave the bootstrapped row as the live view
	// had it, where a replay counts only the chunks left.
	e.write(t, "a5", "s10", finished...)
	liveRow, err := live.streams.Get("a5", "s10")
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	chunks, err := js.Stream(t.Context(), eventlog.DefaultChunksStream)
	if err != nil {
		t.Fatal(err)
	}
	for seq := liveRow.FirstSeq + 2; seq <= liveRow.FirstSeq+3; seq++ {
		if err := chunks.DeleteMsg(t.Context(), uint64(seq)); err != nil {
			t.Fatal(err)
		}
	}
	lg3 := eventlogtest.OpenOn(t, srv, eventlog.Config{})
	boot3 := openStreams(t, lg3, chunk.StreamsProjection())
	replay3 := openStreams(t, lg3, replayed())
	sameViews(t, lg3, boot3, replay3, agents...)
	if got, err := boot3.streams.Get("a5", "s10"); err != nil || !reflect.DeepEqual(got, liveRow) {
		t.Fatalf("bootstrapped a5/s10 = %+v, %v; want the live row %+v", got, err, liveRow)
	}
	if got, _ := replay3.streams.Get("a5", "s10"); got.Chunks != liveRow.Chunks-2 {
		t.Fatalf("replayed a5/s10 counts %d chunks, want %d", got.Chunks, liveRow.Chunks-2)
	}

	// Streams go on after the bootstrap: each chunk is applied once.
	w := chunk.NewWriter(e.b, "a2", "s4", len(started), lg.MaxPayload())
	for _, c := range []chunk.Chunk{{Type: chunk.TextEnd, ID: "t1"}, {Type: chunk.FinishStep}, {Type: chunk.Finish}} {
		if err := w.Write(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.write(t, "a2", "s9", started...)
	sameViews(t, lg2, boot, replay, agents...)
	if info, _ := boot.streams.Get("a2", "s4"); info.Status != chunk.StatusCompleted || info.Chunks != len(finished) {
		t.Fatalf("a2/s4 after the bootstrap = %+v", info)
	}
	if l, _ := boot.streams.Latest("a2"); l.Stream != "s9" {
		t.Fatalf("latest of a2 = %s, want s9", l.Stream)
	}
}

// A view bootstrapped while chunks keep coming (its reads see chunks past
// its cursor) ends equal to a replayed one: a chunk already in a row is
// not applied twice.
func TestStreamsBootstrapUnderWrites(t *testing.T) {
	srv := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := eventlogtest.OpenOn(t, srv, eventlog.Config{})
	e := &retentionEnv{lg: lg, b: runBatcher(t, lg)}
	const streams = 40
	write := func(round int) {
		for i := range streams {
			w := chunk.NewWriter(e.b, "a"+string(rune('a'+i%4)), "s"+itoa(i), round*3, lg.MaxPayload())
			cs := []chunk.Chunk{{Type: chunk.Start}, {Type: chunk.StartStep}, {Type: chunk.TextDelta, ID: "t", Delta: "x"}}
			if round > 0 {
				cs = []chunk.Chunk{{Type: chunk.TextDelta, ID: "t", Delta: "y"}, {Type: chunk.TextDelta, ID: "t", Delta: "z"}, {Type: chunk.TextDelta, ID: "t", Delta: "w"}}
			}
			if round == 5 {
				cs[2] = chunk.Chunk{Type: chunk.Finish}
			}
			for _, c := range cs {
				if err := w.Write(t.Context(), c); err != nil {
					t.Error(err)
					return
				}
			}
			if _, err := w.Flush(t.Context()); err != nil {
				t.Error(err)
				return
			}
		}
	}
	write(0)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for r := 1; r <= 5; r++ {
			write(r)
		}
	}()
	lg2 := eventlogtest.OpenOn(t, srv, eventlog.Config{})
	boot := openStreams(t, lg2, chunk.StreamsProjection())
	<-done
	replay := openStreams(t, lg2, replayed())
	sameViews(t, lg2, boot, replay, "aa", "ab", "ac", "ad")
	for i := range streams {
		info, err := boot.streams.Get("a"+string(rune('a'+i%4)), "s"+itoa(i))
		if err != nil || info.Chunks != 18 || info.Status != chunk.StatusCompleted {
			t.Fatalf("stream %d = %+v, %v", i, info, err)
		}
	}
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}
