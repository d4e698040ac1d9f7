package replay_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/forever-agents/forever/replay"
)

func TestOriginAllowed(t *testing.T) {
	for _, c := range []struct {
		patterns []string
		origin   string
		want     bool
	}{
		{nil, "https://app.example.com", false},
		{[]string{"https://app.example.com"}, "https://app.example.com", true},
		{[]string{"https://app.example.com"}, "http://app.example.com", false},
		{[]string{"https://app.example.com"}, "https://evil.example.com", false},
		{[]string{"app.example.com"}, "http://APP.example.com", true},
		{[]string{"*.example.com"}, "https://a.example.com", true},
		{[]string{"*.example.com"}, "https://example.com.evil.net", false},
		{[]string{"localhost:*"}, "http://localhost:5173", true},
		{[]string{"*"}, "https://anything.net", true},
		{[]string{"*"}, "null", false},
		{[]string{"*"}, "not a url", false},
	} {
		if got := replay.OriginAllowed(c.patterns, c.origin); got != c.want {
			t.Errorf("OriginAllowed(%q, %q) = %v, want %v", c.patterns, c.origin, got, c.want)
		}
	}
}

func do(t *testing.T, method, url string, header map[string]string, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// A browser on an allowed origin gets CORS answers (preflight 204 with the
// methods and the headers it asked for, and Access-Control-Allow-Origin on
// the request itself); one on another origin gets 403 before anything
// runs, over HTTP and WebSocket; requests without Origin or from the
// gateway's own origin are served as before.
func TestCORS(t *testing.T) {
	e := newEnv(t, func(c *replay.GatewayConfig) { c.AllowedOrigins = []string{"https://app.example.com"} })
	chatBody := `{"id":"c1","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"hi"}]}]}`

	resp, _ := do(t, "OPTIONS", e.srv.URL+"/v1/chat", map[string]string{
		"Origin": "https://app.example.com", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type",
	}, "")
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Methods"), "POST") || resp.Header.Get("Access-Control-Allow-Headers") != "content-type" {
		t.Fatalf("preflight from an allowed origin: %d %v", resp.StatusCode, resp.Header)
	}
	resp, body := do(t, "GET", e.srv.URL+"/v1/chat/c1/messages", map[string]string{"Origin": "https://app.example.com"}, "")
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Fatalf("GET from an allowed origin: %d %v %s", resp.StatusCode, resp.Header, body)
	}

	for _, method := range []string{"OPTIONS", "POST"} {
		resp, body := do(t, method, e.srv.URL+"/v1/chat", map[string]string{"Origin": "https://evil.example.net", "Content-Type": "text/plain"}, chatBody)
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" || !strings.Contains(body, "may not call this server") {
			t.Fatalf("%s from another origin: %d %v %s", method, resp.StatusCode, resp.Header, body)
		}
	}
	select {
	case ft := <-e.chats.started:
		t.Fatalf("a refused origin started a turn: %+v", ft)
	default:
	}

	// No Origin (a server-side client), and the gateway's own origin.
	if resp, body := do(t, "GET", e.srv.URL+"/v1/chat/c1/messages", nil, ""); resp.StatusCode != 200 {
		t.Fatalf("GET without Origin: %d %s", resp.StatusCode, body)
	}
	if resp, body := do(t, "GET", e.srv.URL+"/v1/chat/c1/messages", map[string]string{"Origin": e.srv.URL}, ""); resp.StatusCode != 200 {
		t.Fatalf("GET from the gateway's own origin: %d %s", resp.StatusCode, body)
	}

	ws := "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/v1/chat/c1/ws"
	if _, resp, err := websocket.Dial(t.Context(), ws, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"https://evil.example.net"}}}); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("WebSocket from another origin: %v %v", err, resp)
	}
	c, _, err := websocket.Dial(t.Context(), ws, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"https://app.example.com"}}})
	if err != nil {
		t.Fatalf("WebSocket from an allowed origin: %v", err)
	}
	c.CloseNow()
}
