package replay_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/replay"
)

// frame is a server frame of the WebSocket protocol.
type frame struct {
	Type      string          `json:"type"`
	RequestID string          `json:"requestId"`
	StreamID  string          `json:"streamId"`
	MessageID string          `json:"messageId"`
	Cursor    string          `json:"cursor"`
	Chunk     json.RawMessage `json:"chunk"`
	Replay    *bool           `json:"replay"`
	Status    string          `json:"status"`
	Reason    string          `json:"reason"`
	ProbeID   string          `json:"probeId"`
	Error     string          `json:"error"`
	Code      int             `json:"code"`
}

type wsClient struct {
	t *testing.T
	c *websocket.Conn
}

func dialWS(t *testing.T, e *env, chatID string) *wsClient {
	t.Helper()
	return dialURL(t, e.srv.URL, chatID)
}

// dialURL opens the WebSocket of chatID on the gateway at base.
func dialURL(t *testing.T, base, chatID string) *wsClient {
	t.Helper()
	url := "ws" + strings.TrimPrefix(base, "http") + "/v1/chat/" + chatID + "/ws"
	c, _, err := websocket.Dial(t.Context(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return &wsClient{t: t, c: c}
}

func (w *wsClient) send(v any) {
	w.t.Helper()
	if err := wsjson.Write(w.t.Context(), w.c, v); err != nil {
		w.t.Fatal(err)
	}
}

func (w *wsClient) read() frame {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(w.t.Context(), 10*time.Second)
	defer cancel()
	var f frame
	if err := wsjson.Read(ctx, w.c, &f); err != nil {
		w.t.Fatalf("read frame: %v", err)
	}
	return f
}

func (w *wsClient) expect(typ string) frame {
	w.t.Helper()
	f := w.read()
	if f.Type != typ {
		w.t.Fatalf("frame %+v, want type %s", f, typ)
	}
	return f
}

// chunks reads n chunk frames, checking their replay flag and request.
func (w *wsClient) chunks(n int, replay bool, requestID string) []chunk.Chunk {
	w.t.Helper()
	var out []chunk.Chunk
	for range n {
		f := w.expect("chunk")
		if f.Replay == nil || *f.Replay != replay || f.RequestID != requestID || f.Cursor == "" {
			w.t.Fatalf("chunk frame %+v: want replay=%v request %s", f, replay, requestID)
		}
		out = append(out, checkChunk(w.t, string(f.Chunk)))
	}
	return out
}

func TestWSNone(t *testing.T) {
	e := newEnv(t)
	w := dialWS(t, e, "c1")
	w.expect("none")
	w.send(map[string]string{"type": "resume"})
	w.expect("none")
	w.send(map[string]string{"type": "bogus"})
	if f := w.expect("error"); f.Code != 400 {
		t.Fatalf("unknown frame: %+v", f)
	}
}

// TestWSResumeIdleProbe: a resume request while idle is answered "none"
// with the reason "idle" and the request's probeId (the offer sent on
// connect has no probeId); an ack of a request that is not running is
// answered done with replay true at once, as Cloudflare's replay-done
// frame, so the client's resume does not wait for a timeout.
func TestWSResumeIdleProbe(t *testing.T) {
	e := newEnv(t)
	w := dialWS(t, e, "c1")
	if f := w.expect("none"); f.Reason != "idle" || f.ProbeID != "" {
		t.Fatalf("offer on connect %+v, want reason idle and no probeId", f)
	}
	w.send(map[string]string{"type": "resume", "probeId": "p-1"})
	if f := w.expect("none"); f.Reason != "idle" || f.ProbeID != "p-1" {
		t.Fatalf("answer to the probe %+v, want reason idle, probeId p-1", f)
	}
	w.send(map[string]string{"type": "ack", "requestId": "gone"})
	if f := w.expect("done"); f.RequestID != "gone" || f.Replay == nil || !*f.Replay {
		t.Fatalf("ack of a request not running: %+v, want done replay true", f)
	}
	w.send(map[string]string{"type": "ack"})
	if f := w.expect("error"); f.Code != 400 {
		t.Fatalf("ack without requestId: %+v", f)
	}
}

// TestWSTwoOffersEachAckReplaysAll: a client that connects during a turn
// and then sends a resume request gets two offers, the second echoing its
// probeId; each ack replays the whole buffer from the turn's start,
// flagged replay, then replayComplete, then live chunks: a second ack
// while the turn streams is not ignored.
func TestWSTwoOffersEachAckReplaysAll(t *testing.T) {
	e := newEnv(t)
	postChat(t, e, t.Context(), body("c1"))
	ft := e.turn(t)
	all := script(ft)
	e.write(t, ft, all[:3]...)

	w := dialWS(t, e, "c1")
	if f := w.expect("resuming"); f.RequestID != ft.RequestID || f.ProbeID != "" {
		t.Fatalf("offer on connect %+v", f)
	}
	w.send(map[string]string{"type": "resume", "probeId": "p-2"})
	if f := w.expect("resuming"); f.RequestID != ft.RequestID || f.ProbeID != "p-2" {
		t.Fatalf("answer to the probe %+v, want the turn with probeId p-2", f)
	}
	w.send(map[string]string{"type": "ack", "requestId": ft.RequestID})
	first := w.chunks(3, true, ft.RequestID)
	w.expect("replayComplete")
	seq := e.write(t, ft, all[3:5]...)
	w.chunks(2, false, ft.RequestID)

	// A second ack during the stream replays everything again.
	w.send(map[string]string{"type": "ack", "requestId": ft.RequestID})
	again := w.chunks(5, true, ft.RequestID)
	if again[0].Type != chunk.Start || again[0].MessageID != first[0].MessageID || again[4].Delta != all[4].Delta {
		t.Fatalf("second replay %+v", again)
	}
	if f := w.expect("replayComplete"); f.Cursor != seq.String() {
		t.Fatalf("replayComplete %+v, want cursor %s", f, seq)
	}
	e.write(t, ft, all[5:]...)
	w.chunks(len(all)-5, false, ft.RequestID)
	if f := w.expect("done"); f.Status != chunk.StatusCompleted {
		t.Fatalf("done %+v", f)
	}
	// Ended: an ack of it now replays it whole and says done.
	w.send(map[string]string{"type": "resume", "probeId": "p-3"})
	if f := w.expect("none"); f.ProbeID != "p-3" || f.Reason != "idle" {
		t.Fatalf("offer after the end %+v", f)
	}
	w.send(map[string]string{"type": "ack", "requestId": ft.RequestID})
	w.chunks(len(all), true, ft.RequestID)
	w.expect("replayComplete")
	if f := w.expect("done"); f.Status != chunk.StatusCompleted {
		t.Fatalf("done %+v", f)
	}
}

// TestWSPendingProbe: the pending offer echoes the probe too.
func TestWSPendingProbe(t *testing.T) {
	e := newEnv(t)
	postChat(t, e, t.Context(), body("c1"))
	ft := e.turn(t)
	w := dialWS(t, e, "c1")
	w.expect("pending")
	w.send(map[string]string{"type": "resume", "probeId": "p-4"})
	if f := w.expect("pending"); f.RequestID != ft.RequestID || f.ProbeID != "p-4" {
		t.Fatalf("pending %+v, want request %s and probeId p-4", f, ft.RequestID)
	}
}

func TestWSPending(t *testing.T) {
	e := newEnv(t)
	postChat(t, e, t.Context(), body("c1"))
	ft := e.turn(t)
	w := dialWS(t, e, "c1")
	if f := w.expect("pending"); f.RequestID != ft.RequestID {
		t.Fatalf("pending %+v, want request %s", f, ft.RequestID)
	}
	w.send(map[string]string{"type": "ack", "requestId": ft.RequestID})
	w.expect("replayComplete")
	all := script(ft)
	e.write(t, ft, all...)
	got := w.chunks(len(all), false, ft.RequestID)
	if got[0].MessageID != ft.MessageID {
		t.Fatalf("start %+v", got[0])
	}
	if f := w.expect("done"); f.Status != chunk.StatusCompleted {
		t.Fatalf("done %+v", f)
	}
}

func TestWSResumeHandshake(t *testing.T) {
	e := newEnv(t)
	postChat(t, e, t.Context(), body("c1"))
	ft := e.turn(t)
	all := script(ft)
	seq := e.write(t, ft, all[:3]...)

	w := dialWS(t, e, "c1")
	f := w.expect("resuming")
	if f.RequestID != ft.RequestID || f.StreamID != ft.StreamID || f.MessageID != ft.MessageID {
		t.Fatalf("resuming %+v, want %+v", f, ft.Turn)
	}
	// An ack for another request is ignored: the next frame answers the
	// resume request that follows it.
	w.send(map[string]string{"type": "ack", "requestId": "other"})
	w.send(map[string]string{"type": "resume"})
	w.expect("resuming")
	w.send(map[string]string{"type": "ack", "requestId": ft.RequestID})
	got := w.chunks(3, true, ft.RequestID)
	if got[0].Type != chunk.Start || got[0].MessageID != ft.MessageID {
		t.Fatalf("first replayed chunk %+v", got[0])
	}
	if f := w.expect("replayComplete"); f.Cursor != seq.String() {
		t.Fatalf("replayComplete cursor %s, want %s", f.Cursor, seq)
	}
	e.write(t, ft, all[3:]...)
	w.chunks(len(all)-3, false, ft.RequestID)
	if f := w.expect("done"); f.Status != chunk.StatusCompleted || f.RequestID != ft.RequestID {
		t.Fatalf("done %+v", f)
	}
	// Finished: nothing to resume.
	w.send(map[string]string{"type": "resume"})
	w.expect("none")
}

func TestWSErrorTurnReplaysThenError(t *testing.T) {
	e := newEnv(t)
	postChat(t, e, t.Context(), body("c1"))
	ft := e.turn(t)
	e.write(t, ft, script(ft)[:4]...)
	w := dialWS(t, e, "c1")
	w.expect("resuming")
	// The turn fails before the client acknowledges.
	e.write(t, ft, chunk.Chunk{Type: chunk.Error, ErrorText: "provider down"})
	w.send(map[string]string{"type": "ack", "requestId": ft.RequestID})
	got := w.chunks(5, true, ft.RequestID)
	if last := got[4]; last.Type != chunk.Error || last.ErrorText != "provider down" {
		t.Fatalf("last replayed chunk %+v", last)
	}
	w.expect("replayComplete")
	if f := w.expect("done"); f.Status != chunk.StatusError {
		t.Fatalf("done %+v", f)
	}
}

func TestWSChat(t *testing.T) {
	e := newEnv(t)
	w := dialWS(t, e, "c1")
	w.expect("none")
	w.send(map[string]any{"type": "chat", "body": json.RawMessage(body("other"))})
	if f := w.expect("error"); f.Code != 400 {
		t.Fatalf("chat for another id: %+v", f)
	}
	w.send(map[string]any{"type": "chat", "body": json.RawMessage(body("c1"))})
	ft := e.turn(t)
	if f := w.expect("started"); f.RequestID != ft.RequestID || f.MessageID != ft.MessageID {
		t.Fatalf("started %+v", f)
	}
	all := script(ft)
	e.write(t, ft, all...)
	w.chunks(len(all), false, ft.RequestID)
	w.expect("done")
	w.send(map[string]string{"type": "stop"})
	w.expect("stopped")
}

func TestWSStopping(t *testing.T) {
	e := newEnv(t)
	w := dialWS(t, e, "c1")
	w.expect("none")
	close(e.stopping)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, _, err := w.c.Read(ctx)
	if got := websocket.CloseStatus(err); got != websocket.StatusGoingAway {
		t.Fatalf("close status %v (%v), want going away", got, err)
	}
}

// A client that reconnects after its turn failed is offered the failed
// turn (it used to be told "none" and never learned of the error); acking
// replays it to its error chunk and done "error".
func TestWSOffersFailedTurn(t *testing.T) {
	e := newEnv(t)
	postChat(t, e, t.Context(), body("c1"))
	ft := e.turn(t)
	e.write(t, ft, script(ft)[:4]...)
	e.write(t, ft, chunk.Chunk{Type: chunk.Error, ErrorText: "provider down"})
	w := dialWS(t, e, "c1")
	f := w.expect("resuming")
	if f.RequestID != ft.RequestID || f.StreamID != ft.StreamID || f.Status != chunk.StatusError {
		t.Fatalf("offer %+v, want the failed turn %s", f, ft.RequestID)
	}
	w.send(map[string]string{"type": "ack", "requestId": ft.RequestID})
	got := w.chunks(5, true, ft.RequestID)
	if got[0].Type != chunk.Start || got[4].Type != chunk.Error || got[4].ErrorText != "provider down" {
		t.Fatalf("replayed %+v", got)
	}
	w.expect("replayComplete")
	if f := w.expect("done"); f.Status != chunk.StatusError {
		t.Fatalf("done %+v", f)
	}
}

// TestWSCursorsAreStrings: every cursor a WebSocket client sees is a JSON
// string of digits (a JSON number loses precision in JavaScript past
// 2^53), and the started frame carries the turn's cursor: the stream's
// real start, before its first chunk and after the agent's last one.
func TestWSCursorsAreStrings(t *testing.T) {
	e := newEnv(t)
	postChat(t, e, t.Context(), body("c1"))
	first := e.turn(t)
	prev := e.write(t, first, script(first)...)

	w := dialWS(t, e, "c1")
	w.expect("none")
	w.send(map[string]any{"type": "chat", "body": json.RawMessage(body("c1"))})
	ft := e.turn(t)
	all := script(ft)
	e.write(t, ft, all...)
	var started replay.Cursor
	var chunkCursors []replay.Cursor
	for done := false; !done; {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, data, err := w.c.Read(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		var f map[string]json.RawMessage
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatal(err)
		}
		var typ string
		json.Unmarshal(f["type"], &typ)
		raw, ok := f["cursor"]
		switch typ {
		case "started", "chunk":
			if !ok {
				t.Fatalf("%s frame without cursor: %s", typ, data)
			}
		case "done":
			done = true
		}
		if !ok {
			continue
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatalf("cursor %s in %s is not a JSON string", raw, data)
		}
		c, err := replay.ParseCursor(s)
		if err != nil {
			t.Fatalf("cursor %q in %s: %v", s, data, err)
		}
		if typ == "started" {
			started = c
		} else {
			chunkCursors = append(chunkCursors, c)
		}
	}
	if started != replay.CursorAt(prev) {
		t.Fatalf("started cursor %v, want the previous turn's last chunk %v", started, prev)
	}
	if len(chunkCursors) != len(all) || chunkCursors[0].Compare(started) <= 0 {
		t.Fatalf("chunk cursors %v after start %v", chunkCursors, started)
	}
}
