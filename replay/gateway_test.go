package replay_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/replay"
)

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	ID   string
	Data string
}

// sseReader reads SSE events from a response body.
type sseReader struct {
	t  *testing.T
	br *bufio.Reader
}

func newSSE(t *testing.T, resp *http.Response) *sseReader {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	return &sseReader{t: t, br: bufio.NewReader(resp.Body)}
}

// next returns the next event, or false at the end of the body.
func (r *sseReader) next() (sseEvent, bool) {
	r.t.Helper()
	var ev sseEvent
	seen := false
	for {
		line, err := r.br.ReadString('\n')
		if err != nil {
			if err != io.EOF {
				r.t.Fatalf("read sse: %v", err)
			}
			return ev, false
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if seen {
				return ev, true
			}
		case strings.HasPrefix(line, "id: "):
			ev.ID, seen = line[4:], true
		case strings.HasPrefix(line, "data: "):
			ev.Data, seen = line[6:], true
		default:
			r.t.Fatalf("unexpected sse line %q", line)
		}
	}
}

// take reads n events.
func (r *sseReader) take(n int) []sseEvent {
	r.t.Helper()
	var out []sseEvent
	for range n {
		ev, ok := r.next()
		if !ok {
			r.t.Fatalf("stream ended after %d events, want %d", len(out), n)
		}
		out = append(out, ev)
	}
	return out
}

// rest reads until the end of the body.
func (r *sseReader) rest() []sseEvent {
	var out []sseEvent
	for {
		ev, ok := r.next()
		if !ok {
			return out
		}
		out = append(out, ev)
	}
}

// allowed lists, per chunk type, the fields the AI SDK v5 strict schemas
// accept (the ones our chunks can carry).
var allowed = map[string][]string{
	"start":                 {"type", "messageId", "messageMetadata"},
	"start-step":            {"type"},
	"finish-step":           {"type"},
	"finish":                {"type", "messageMetadata"},
	"abort":                 {"type"},
	"text-start":            {"type", "id", "providerMetadata"},
	"text-delta":            {"type", "id", "delta", "providerMetadata"},
	"text-end":              {"type", "id", "providerMetadata"},
	"reasoning-start":       {"type", "id", "providerMetadata"},
	"reasoning-delta":       {"type", "id", "delta", "providerMetadata"},
	"reasoning-end":         {"type", "id", "providerMetadata"},
	"tool-input-start":      {"type", "toolCallId", "toolName", "providerExecuted", "dynamic"},
	"tool-input-delta":      {"type", "toolCallId", "inputTextDelta"},
	"tool-input-available":  {"type", "toolCallId", "toolName", "input", "providerExecuted", "providerMetadata", "dynamic"},
	"tool-output-available": {"type", "toolCallId", "output", "providerExecuted", "dynamic", "preliminary"},
	"tool-output-error":     {"type", "toolCallId", "errorText", "providerExecuted", "dynamic"},
	"error":                 {"type", "errorText"},
}

// checkChunk checks one data payload against the strict schema of its type
// and returns the decoded chunk.
func checkChunk(t *testing.T, data string) chunk.Chunk {
	t.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(data), &fields); err != nil {
		t.Fatalf("data %q: %v", data, err)
	}
	var c chunk.Chunk
	json.Unmarshal([]byte(data), &c)
	keys, ok := allowed[c.Type]
	if !ok {
		t.Fatalf("unknown chunk type in %s", data)
	}
	for k := range fields {
		found := false
		for _, a := range keys {
			found = found || a == k
		}
		if !found {
			t.Errorf("chunk %s carries field %q the AI SDK rejects", c.Type, k)
		}
	}
	switch c.Type {
	case "text-delta", "reasoning-delta":
		if _, ok := fields["delta"]; !ok {
			t.Errorf("%s without delta: %s", c.Type, data)
		}
	case "error":
		if _, ok := fields["errorText"]; !ok {
			t.Errorf("error without errorText: %s", data)
		}
	}
	return c
}

func postChat(t *testing.T, e *env, ctx context.Context, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/v1/chat", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func get(t *testing.T, e *env, path string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", e.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func body(id string) string {
	return fmt.Sprintf(`{"id":%q,"messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"hi"}]}],"trigger":"submit-message"}`, id)
}

// checkSequence checks a whole SSE turn: start first, balanced text ids,
// finish last, then [DONE]; increasing cursors; only allowed fields.
func checkSequence(t *testing.T, evs []sseEvent, messageID string) []chunk.Chunk {
	t.Helper()
	if len(evs) < 3 || evs[len(evs)-1].Data != "[DONE]" || evs[len(evs)-1].ID != "" {
		t.Fatalf("stream does not end with data: [DONE]: %+v", evs)
	}
	var chunks []chunk.Chunk
	var last replay.Cursor
	open := map[string]bool{}
	for i, ev := range evs[:len(evs)-1] {
		cur, err := replay.ParseCursor(ev.ID)
		if err != nil {
			t.Fatalf("event %d id: %v", i, err)
		}
		if cur.Compare(last) <= 0 {
			t.Fatalf("event %d cursor %v not after %v", i, cur, last)
		}
		last = cur
		if strings.Contains(ev.Data, "requestId") || strings.Contains(ev.Data, "finishReason") {
			t.Errorf("event %d leaks a field: %s", i, ev.Data)
		}
		c := checkChunk(t, ev.Data)
		switch c.Type {
		case "text-start":
			open[c.ID] = true
		case "text-delta":
			if !open[c.ID] {
				t.Errorf("text-delta %s outside text-start/end", c.ID)
			}
		case "text-end":
			delete(open, c.ID)
		}
		chunks = append(chunks, c)
	}
	if chunks[0].Type != chunk.Start || chunks[0].MessageID != messageID {
		t.Errorf("first chunk = %+v, want start of %s", chunks[0], messageID)
	}
	if !chunks[len(chunks)-1].Terminal() {
		t.Errorf("last chunk %s is not terminal", chunks[len(chunks)-1].Type)
	}
	if len(open) != 0 {
		t.Errorf("text ids not ended: %v", open)
	}
	return chunks
}

func TestSSEChat(t *testing.T) {
	e := newEnv(t)
	resp := postChat(t, e, t.Context(), body("c1"))
	for k, v := range map[string]string{
		"Content-Type":                  "text/event-stream",
		"Cache-Control":                 "no-cache",
		"X-Vercel-Ai-Ui-Message-Stream": "v1",
		"X-Accel-Buffering":             "no",
	} {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	ft := e.turn(t)
	if ft.Agent != "c1" || !strings.Contains(string(ft.Body), `"trigger":"submit-message"`) {
		t.Fatalf("Send got agent %q body %s", ft.Agent, ft.Body)
	}
	e.write(t, ft, script(ft)...)
	chunks := checkSequence(t, newSSE(t, resp).rest(), ft.MessageID)
	if got, want := len(chunks), len(script(ft)); got != want {
		t.Fatalf("got %d chunks, want %d", got, want)
	}
}

func TestSSEResume(t *testing.T) {
	e := newEnv(t)
	if resp := get(t, e, "/v1/chat/c1/stream"); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("idle chat: status %d, want 204", resp.StatusCode)
	}
	resp := postChat(t, e, t.Context(), body("c1"))
	ft := e.turn(t)
	all := script(ft)
	e.write(t, ft, all[:4]...)
	first := newSSE(t, resp).take(4)

	// A reload mid-turn resumes from the start, with the same messageId.
	resumed := newSSE(t, get(t, e, "/v1/chat/c1/stream"))
	head := resumed.take(4)
	for i := range head {
		if head[i] != first[i] {
			t.Fatalf("resumed event %d = %+v, want %+v", i, head[i], first[i])
		}
	}
	// With Last-Event-ID, only what follows.
	tail := newSSE(t, get(t, e, "/v1/chat/c1/stream", "Last-Event-ID", first[1].ID))
	e.write(t, ft, all[4:]...)
	full := append(head, resumed.rest()...)
	checkSequence(t, full, ft.MessageID)
	rest := tail.rest()
	if got, want := len(rest), len(full)-2; got != want {
		t.Fatalf("after Last-Event-ID %s: %d events, want %d", first[1].ID, got, want)
	}
	for i := range rest {
		if rest[i] != full[i+2] {
			t.Fatalf("Last-Event-ID event %d = %+v, want %+v", i, rest[i], full[i+2])
		}
	}
	// Finished: 204, unless ?after= asks for the tail explicitly.
	if resp := get(t, e, "/v1/chat/c1/stream"); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("finished turn: status %d, want 204", resp.StatusCode)
	}
	n := len(full)
	evs := newSSE(t, get(t, e, "/v1/chat/c1/stream?after="+full[n-3].ID)).rest()
	if len(evs) != 2 || evs[0] != full[n-2] || evs[1].Data != "[DONE]" {
		t.Fatalf("?after= on a finished stream: %+v", evs)
	}
	// At its terminal chunk, or after it, nothing but [DONE], which a
	// stock AI SDK client waits for.
	term, err := replay.ParseCursor(full[n-2].ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, after := range []string{full[n-2].ID, replay.CursorAt(term.Seq() + 5).String()} {
		evs := newSSE(t, get(t, e, "/v1/chat/c1/stream?after="+after)).rest()
		if len(evs) != 1 || evs[0].Data != "[DONE]" {
			t.Fatalf("?after=%s, at or after the terminal chunk: %+v", after, evs)
		}
		evs = newSSE(t, get(t, e, "/v1/chat/c1/stream?after=0", "Last-Event-ID", after)).rest()
		if len(evs) != 1 || evs[0].Data != "[DONE]" {
			t.Fatalf("Last-Event-ID %s, at or after the terminal chunk: %+v", after, evs)
		}
	}
}

// A turn started but with no chunk yet is followed from its start.
func TestSSEResumePending(t *testing.T) {
	e := newEnv(t)
	postChat(t, e, t.Context(), body("c1"))
	ft := e.turn(t)
	resp := get(t, e, "/v1/chat/c1/stream")
	e.write(t, ft, script(ft)...)
	checkSequence(t, newSSE(t, resp).rest(), ft.MessageID)
}

func TestStopVersusDisconnect(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	resp := postChat(t, e, ctx, body("c1"))
	ft := e.turn(t)
	all := script(ft)
	e.write(t, ft, all[:3]...)
	newSSE(t, resp).take(3)
	cancel() // the client goes away
	waitFor(t, "the SSE handler to end", func() bool { return e.gauge(t, "sse") == 0 })
	if got := e.chats.stops.Load(); got != 0 {
		t.Fatalf("a disconnect called Stop %d times", got)
	}
	// The turn goes on; a resume sees all of it.
	resumed := newSSE(t, get(t, e, "/v1/chat/c1/stream"))
	e.write(t, ft, all[3:]...)
	checkSequence(t, resumed.rest(), ft.MessageID)

	resp = post(t, e, "/v1/chat/c1/stop", "")
	var got map[string]bool
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != 200 || !got["stopped"] {
		t.Fatalf("stop: status %d, %v, %v", resp.StatusCode, got, err)
	}
	if got := e.chats.stops.Load(); got != 1 {
		t.Fatalf("Stop called %d times, want 1", got)
	}
}

// Closing Stopping ends long-lived responses without [DONE].
func TestSSEStopping(t *testing.T) {
	e := newEnv(t)
	resp := postChat(t, e, t.Context(), body("c1"))
	ft := e.turn(t)
	e.write(t, ft, script(ft)[:2]...)
	r := newSSE(t, resp)
	r.take(2)
	close(e.stopping)
	if rest := r.rest(); len(rest) != 0 {
		t.Fatalf("after stopping: %+v", rest)
	}
}

func post(t *testing.T, e *env, path, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "POST", e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestMessages(t *testing.T) {
	e := newEnv(t)
	resp := get(t, e, "/v1/chat/c1/messages")
	var msgs []map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&msgs); err != nil || resp.StatusCode != 200 || len(msgs) != 1 {
		t.Fatalf("messages: status %d, %v, %v", resp.StatusCode, msgs, err)
	}
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name   string
		do     func() *http.Response
		status int
		substr string
	}{
		{"malformed json", func() *http.Response { return post(t, e, "/v1/chat", `{"id":`) }, 400, "the body is not valid JSON: it ends early, at byte 6"},
		{"wrong type", func() *http.Response { return post(t, e, "/v1/chat", `{"id":"c1","messages":"hi"}`) }, 400, `"messages" must be an array, got a string`},
		{"no messages", func() *http.Response { return post(t, e, "/v1/chat", `{"id":"c1","messages":[]}`) }, 400, `no "messages"`},
		{"no id", func() *http.Response { return post(t, e, "/v1/chat", `{"messages":[{}]}`) }, 400, `no "id"`},
		{"bad id", func() *http.Response { return post(t, e, "/v1/chat", `{"id":"a.b","messages":[{}]}`) }, 400, `"id" "a.b" is not a valid agent id`},
		{"conflict from Chats", func() *http.Response { return post(t, e, "/v1/chat", body("busy")) }, 409, "already running"},
		{"bad path id", func() *http.Response { return get(t, e, "/v1/chat/a.b/stream") }, 400, `chat id "a.b" is not a valid agent id`},
		{"bad Last-Event-ID", func() *http.Response { return get(t, e, "/v1/chat/c1/stream", "Last-Event-ID", "abc") }, 400, `the Last-Event-ID header "abc" is not a cursor`},
		{"bad after", func() *http.Response { return get(t, e, "/v1/chat/c1/stream?after=-1") }, 400, `the after parameter "-1" is not a cursor`},
		{"unknown chat messages", func() *http.Response { return get(t, e, "/v1/chat/missing/messages") }, 404, `no chat "missing"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := tt.do()
			var got struct {
				Code  int    `json:"code"`
				Error string `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatalf("body is not JSON: %v", err)
			}
			if resp.StatusCode != tt.status || got.Code != tt.status || !strings.Contains(got.Error, tt.substr) {
				t.Fatalf("status %d body %+v; want %d containing %q", resp.StatusCode, got, tt.status, tt.substr)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("content-type %q", ct)
			}
		})
	}
}

func TestPage(t *testing.T) {
	e := newEnv(t)
	resp := get(t, e, "/")
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `id="send"`) || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("page: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if resp := get(t, e, "/nope"); resp.StatusCode != 404 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("/nope: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

// blockingIndex is a StreamIndex whose projection never catches up: it
// waits for the request's ctx and reports what ended it.
type blockingIndex struct {
	entered chan struct{}
	ended   chan error
}

func (b blockingIndex) Latest(ctx context.Context, agent string) (chunk.StreamInfo, error) {
	close(b.entered)
	<-ctx.Done()
	b.ended <- ctx.Err()
	return chunk.StreamInfo{}, ctx.Err()
}

func (b blockingIndex) Get(ctx context.Context, agent, stream string) (chunk.StreamInfo, error) {
	return b.Latest(ctx, agent)
}

// TestStreamIndexGetsRequestContext: a resume's stream lookup runs under
// the request's ctx, so a client that goes away ends a lookup waiting for
// the projection instead of leaving it to a timeout of its own.
func TestStreamIndexGetsRequestContext(t *testing.T) {
	e := newEnv(t)
	idx := blockingIndex{entered: make(chan struct{}), ended: make(chan error, 1)}
	gw, err := replay.NewGateway(replay.GatewayConfig{Log: e.lg, Chats: e.chats, Streams: idx})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/chat/a1/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		<-idx.entered
		cancel()
	}()
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	select {
	case err := <-idx.ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("index ended with %v, want the request's cancellation", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the index never saw the request end")
	}
}
