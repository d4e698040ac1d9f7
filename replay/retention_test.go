package replay_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/apierror/apierrortest"
	"github.com/forever-agents/forever/replay"
	"github.com/nats-io/nats.go/jetstream"
)

// expire runs chunk retention as if MaxAge had passed since every stream
// ended, and waits until the streams view applied the expiry markers.
func (e *env) expire(t *testing.T, want int) {
	t.Helper()
	sw, err := chunk.NewSweeper(chunk.SweeperConfig{
		Log: e.lg, Streams: e.streams, MaxAge: time.Hour,
		Now: func() time.Time { return time.Now().Add(100 * time.Hour) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := sw.Sweep(t.Context()); n != want || err != nil {
		t.Fatalf("sweep: %d expired, %v; want %d", n, err, want)
	}
	last, err := e.lg.LastSeq(t.Context(), eventlog.Filter{Chunks: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.pr.WaitFor(t.Context(), last); err != nil {
		t.Fatal(err)
	}
}

// dropFirstChunk deletes a stream's first stored chunk, as the chunks
// stream's age cap does.
func (e *env) dropFirstChunk(t *testing.T, agent, stream string) {
	t.Helper()
	first, ok, err := e.lg.Next(t.Context(), eventlog.Filter{Agent: agent, Stream: stream}, 0)
	if err != nil || !ok {
		t.Fatalf("first chunk: %v %v", ok, err)
	}
	js, err := jetstream.New(eventlogtest.Connect(t, e.s))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(t.Context(), eventlog.DefaultChunksStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(t.Context(), uint64(first.Seq)); err != nil {
		t.Fatal(err)
	}
}

// check410 checks a 410 Gone {"code":410,"error":"chunks expired: ..."}
// answer.
func check410(t *testing.T, resp *http.Response) {
	t.Helper()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusGone {
		t.Fatalf("status %d %s, want 410", resp.StatusCode, b)
	}
	if msg := apierrortest.CheckBody(t, "resume", http.StatusGone, b); !strings.HasPrefix(msg, "chunks expired: ") {
		t.Fatalf("body %s, want {\"code\":410,\"error\":\"chunks expired: ...\"}", b)
	}
}

// A resume of a stream whose chunks retention purged answers 410 Gone over
// SSE, instead of an empty 200; an idle chat asked for nothing in
// particular still answers 204; the Go client gets chunk.ErrExpired.
func TestSSEResumeExpired(t *testing.T) {
	e := newEnv(t)
	postChat(t, e, t.Context(), body("c1"))
	ft := e.turn(t)
	e.write(t, ft, script(ft)...)
	e.expire(t, 1)

	check410(t, get(t, e, "/v1/chat/c1/stream?after=0"))
	check410(t, get(t, e, "/v1/chat/c1/stream?after=3", "Last-Event-ID", "2"))
	if resp := get(t, e, "/v1/chat/c1/stream"); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("idle resume: %d, want 204", resp.StatusCode)
	}
	info, err := e.streams.Get("c1", ft.StreamID)
	if err != nil || !info.Expired {
		t.Fatalf("stream metadata %+v, %v: want expired", info, err)
	}

	c := replay.NewClient(e.lg)
	for _, after := range []replay.Cursor{{}, replay.CursorAt(5), replay.CursorAt(1 << 40)} {
		var got error
		for _, err := range c.Follow(t.Context(), "c1", ft.StreamID, after) {
			got = err
		}
		if !errors.Is(got, chunk.ErrExpired) || replay.StatusCode(got) != http.StatusGone {
			t.Fatalf("follow after %d: %v, want chunk.ErrExpired", after, got)
		}
	}
}

// The latest turn failed and its chunks expired: the WebSocket still offers
// it, and the ack is answered with an error frame with code 410.
func TestWSResumeExpired(t *testing.T) {
	e := newEnv(t)
	postChat(t, e, t.Context(), body("c1"))
	ft := e.turn(t)
	e.write(t, ft, script(ft)[:4]...)
	e.write(t, ft, chunk.Chunk{Type: chunk.Error, ErrorText: "provider down"})
	e.expire(t, 1)

	w := dialWS(t, e, "c1")
	if f := w.expect("resuming"); f.RequestID != ft.RequestID {
		t.Fatalf("offer %+v", f)
	}
	w.send(map[string]string{"type": "ack", "requestId": ft.RequestID})
	if f := w.expect("error"); f.Code != http.StatusGone || !strings.HasPrefix(f.Error, "chunks expired: ") || f.RequestID != ft.RequestID {
		t.Fatalf("frame %+v, want an error with code 410", f)
	}
	// The connection goes on.
	w.send(map[string]string{"type": "resume"})
	w.expect("resuming")
}

// A turn still streaming whose first chunks are gone (the view's FirstSeq
// is older than the first chunk stored) answers 410 over SSE and
// WebSocket rather than a stream without its start.
func TestResumeFirstChunksGone(t *testing.T) {
	e := newEnv(t)
	postChat(t, e, t.Context(), body("c1"))
	ft := e.turn(t)
	e.write(t, ft, script(ft)[:4]...)
	e.dropFirstChunk(t, "c1", ft.StreamID)

	check410(t, get(t, e, "/v1/chat/c1/stream"))
	w := dialWS(t, e, "c1")
	w.expect("resuming")
	w.send(map[string]string{"type": "ack", "requestId": ft.RequestID})
	if f := w.expect("error"); f.Code != http.StatusGone || !strings.HasPrefix(f.Error, "chunks expired: ") {
		t.Fatalf("frame %+v, want an error with code 410", f)
	}
	var got error
	for _, err := range replay.NewClient(e.lg).Follow(t.Context(), "c1", ft.StreamID, replay.Cursor{}) {
		got = err
		break
	}
	if !errors.Is(got, chunk.ErrExpired) {
		t.Fatalf("client follow from the start: %v, want chunk.ErrExpired", got)
	}

	// A cursor past what was removed still resumes: nothing it needs is
	// gone.
	last, err := e.lg.LastSeq(t.Context(), eventlog.Filter{Agent: "c1", Stream: ft.StreamID})
	if err != nil {
		t.Fatal(err)
	}
	resp := get(t, e, "/v1/chat/c1/stream", "Last-Event-ID", replay.CursorAt(last).String())
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("resume after the gap: %d, want 200", resp.StatusCode)
	}
}
