package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/internal/apierror/apierrortest"
	"github.com/forever-agents/forever/replay"
)

// ghostIndex is a StreamIndex that says an agent's latest stream is
// still streaming, whatever the log holds: a view behind or ahead of the
// log, to reach the errors a follow meets after the resume was accepted.
type ghostIndex struct {
	replay.StreamIndex
	info chunk.StreamInfo
}

func (g ghostIndex) Latest(ctx context.Context, agent string) (chunk.StreamInfo, error) {
	if agent == g.info.Agent {
		return g.info, nil
	}
	return g.StreamIndex.Latest(ctx, agent)
}

func (g ghostIndex) Get(ctx context.Context, agent, stream string) (chunk.StreamInfo, error) {
	if agent == g.info.Agent && stream == g.info.Stream {
		return g.info, nil
	}
	return g.StreamIndex.Get(ctx, agent, stream)
}

// TestEveryErrorShape goes through every error the gateway sends, over
// HTTP, SSE and WebSocket: each is {"code": N, "error": "..."} with N the
// HTTP status, and no message names a Go type or package or carries a
// "replay: bad request:" prefix.
func TestEveryErrorShape(t *testing.T) {
	e := newEnv(t, func(c *replay.GatewayConfig) {
		c.MaxBodyBytes = 2048
		c.AllowedOrigins = []string{"https://app.example.com"}
	})

	// An expired stream, and a gateway whose index still shows it
	// streaming (FirstSeq unknown), so the follow itself meets the expiry.
	postChat(t, e, t.Context(), body("gone"))
	ft := e.turn(t)
	e.write(t, ft, script(ft)...)
	e.expire(t, 1)
	ghost := newGateway(t, e, ghostIndex{replay.ProjectedIndex{Streams: e.streams},
		chunk.StreamInfo{Agent: "gone", Stream: ft.StreamID, RequestID: ft.RequestID, MessageID: ft.MessageID, Status: chunk.StatusStreaming}})
	nowhere := newGateway(t, e, ghostIndex{replay.ProjectedIndex{Streams: e.streams},
		chunk.StreamInfo{Agent: "nowhere", Stream: "s0", RequestID: "r0", Status: chunk.StatusStreaming}})

	chatBody := body("c1")
	big := fmt.Sprintf(`{"id":"c1","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":%q}]}]}`, strings.Repeat("x", 4096))
	hdr := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	httpCases := []struct {
		name, method, url string
		header            map[string]string
		body              string
		code              int
	}{
		{"malformed JSON", "POST", "/v1/chat", nil, `{"id":`, 400},
		{"not JSON", "POST", "/v1/chat", nil, `hello`, 400},
		{"empty body", "POST", "/v1/chat", nil, ``, 400},
		{"wrong type", "POST", "/v1/chat", nil, `{"id":7,"messages":[{}]}`, 400},
		{"wrong nested type", "POST", "/v1/chat", nil, `{"id":"c1","messages":{"a":1}}`, 400},
		{"two values", "POST", "/v1/chat", nil, chatBody + chatBody, 400},
		{"no id", "POST", "/v1/chat", nil, `{"messages":[{}]}`, 400},
		{"bad id", "POST", "/v1/chat", nil, `{"id":"a.b","messages":[{}]}`, 400},
		{"long id", "POST", "/v1/chat", nil, fmt.Sprintf(`{"id":%q,"messages":[{}]}`, strings.Repeat("a", 300)), 400},
		{"no messages", "POST", "/v1/chat", nil, `{"id":"c1","messages":[]}`, 400},
		{"too large", "POST", "/v1/chat", nil, big, 413},
		{"conflict", "POST", "/v1/chat", nil, body("busy"), 409},
		{"internal conflict", "POST", "/v1/chat", nil, body("legacy"), 409},
		{"internal failure", "POST", "/v1/chat", nil, body("broken"), 500},
		{"bad path id stream", "GET", "/v1/chat/a.b/stream", nil, "", 400},
		{"bad path id stop", "POST", "/v1/chat/a*/stop", nil, "", 400},
		{"bad path id messages", "GET", "/v1/chat/a>/messages", nil, "", 400},
		{"bad path id ws", "GET", "/v1/chat/a.b/ws", nil, "", 400},
		{"bad Last-Event-ID", "GET", "/v1/chat/c1/stream", hdr("Last-Event-ID", "abc"), "", 400},
		{"bad after", "GET", "/v1/chat/c1/stream?after=1.x", nil, "", 400},
		{"huge after", "GET", "/v1/chat/c1/stream?after=18446744073709551616", nil, "", 400},
		{"unknown chat", "GET", "/v1/chat/missing/messages", nil, "", 404},
		{"unknown path", "GET", "/v2/chat", nil, "", 404},
		{"wrong method", "GET", "/v1/chat", nil, "", 404},
		{"not a WebSocket", "GET", "/v1/chat/c1/ws", nil, "", 400},
		{"origin refused", "POST", "/v1/chat", hdr("Origin", "https://evil.example.net"), chatBody, 403},
		{"preflight refused", "OPTIONS", "/v1/chat", hdr("Origin", "https://evil.example.net", "Access-Control-Request-Method", "POST"), "", 403},
		{"expired", "GET", "/v1/chat/gone/stream?after=0", nil, "", 410},
	}
	for _, c := range httpCases {
		t.Run(c.name, func(t *testing.T) {
			resp, b := do(t, c.method, e.srv.URL+c.url, c.header, c.body)
			if resp.StatusCode != c.code {
				t.Fatalf("%s %s: status %d %s, want %d", c.method, c.url, resp.StatusCode, b, c.code)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content-type %q", ct)
			}
			t.Logf("%d %s", c.code, apierrortest.CheckBody(t, c.name, c.code, []byte(b)))
		})
	}

	// SSE: a follow that meets an error for good ends the stream with an
	// AI SDK error chunk (then [DONE]) instead of a silent end.
	for _, c := range []struct {
		name string
		url  string
	}{
		{"sse chunks expired", ghost + "/v1/chat/gone/stream"},
		{"sse no such stream", nowhere + "/v1/chat/nowhere/stream"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, b := do(t, "GET", c.url, nil, "")
			if resp.StatusCode != 200 || !strings.HasSuffix(b, "data: [DONE]\n\n") {
				t.Fatalf("status %d body %q, want 200 ending in [DONE]", resp.StatusCode, b)
			}
			data, _, _ := strings.Cut(strings.TrimPrefix(b, "data: "), "\n")
			var ch struct{ Type, ErrorText string }
			if err := json.Unmarshal([]byte(data), &ch); err != nil || ch.Type != "error" {
				t.Fatalf("first event %q, want an error chunk", data)
			}
			apierrortest.CheckMessage(t, c.name, ch.ErrorText)
			t.Logf("%s: %s", c.name, ch.ErrorText)
		})
	}

	// WebSocket error frames.
	checkFrame := func(t *testing.T, what string, f frame, code int) {
		t.Helper()
		if f.Type != "error" || f.Code != code {
			t.Fatalf("%s: frame %+v, want an error with code %d", what, f, code)
		}
		apierrortest.CheckMessage(t, what, f.Error)
		t.Logf("%s: %d %s", what, f.Code, f.Error)
	}
	t.Run("ws frames", func(t *testing.T) {
		w := dialWS(t, e, "c1")
		w.expect("none")
		if err := w.c.Write(t.Context(), websocket.MessageBinary, []byte(`{"type":"resume"}`)); err != nil {
			t.Fatal(err)
		}
		checkFrame(t, "binary frame", w.read(), 400)
		for _, c := range []struct {
			what  string
			frame string
			code  int
		}{
			{"frame not JSON", `{"type":`, 400},
			{"frame wrong type", `{"type":7}`, 400},
			{"frame unknown type", `{"type":"bogus"}`, 400},
			{"chat without body", `{"type":"chat"}`, 400},
			{"chat body not an object", `{"type":"chat","body":"hi"}`, 400},
			{"chat body wrong type", `{"type":"chat","body":{"id":"c1","messages":7}}`, 400},
			{"chat for another chat", `{"type":"chat","body":` + body("c2") + `}`, 400},
		} {
			if err := w.c.Write(t.Context(), websocket.MessageText, []byte(c.frame)); err != nil {
				t.Fatal(err)
			}
			checkFrame(t, c.what, w.read(), c.code)
		}
	})
	t.Run("ws chat refused", func(t *testing.T) {
		for agent, code := range map[string]int{"busy": 409, "legacy": 409, "broken": 500} {
			w := dialWS(t, e, agent)
			w.expect("none")
			w.send(map[string]any{"type": "chat", "body": json.RawMessage(body(agent))})
			checkFrame(t, "chat of "+agent, w.read(), code)
		}
	})
	t.Run("ws expired while following", func(t *testing.T) {
		w := dialURL(t, ghost, "gone")
		w.expect("resuming")
		w.send(map[string]string{"type": "ack", "requestId": ft.RequestID})
		f := w.read()
		for f.Type == "replayComplete" {
			f = w.read()
		}
		checkFrame(t, "expired follow", f, 410)
		if f.RequestID != ft.RequestID {
			t.Fatalf("error frame %+v, want request %s", f, ft.RequestID)
		}
	})
}

// newGateway serves another gateway on e's log and chats, reading streams
// from idx, and returns its URL.
func newGateway(t *testing.T, e *env, idx replay.StreamIndex) string {
	t.Helper()
	gw, err := replay.NewGateway(replay.GatewayConfig{Log: e.lg, Chats: e.chats, Streams: idx})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	return srv.URL
}
