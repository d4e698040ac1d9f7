package agentd

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	ID   string
	Data string
}

// readSSE reads events from r until [DONE], EOF, or max events (0: all).
func readSSE(t *testing.T, r io.Reader, max int) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			cur.ID = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			cur.Data = strings.TrimPrefix(line, "data: ")
		case line == "" && cur.Data != "":
			out = append(out, cur)
			if cur.Data == "[DONE]" || (max > 0 && len(out) >= max) {
				return out
			}
			cur = sseEvent{}
		}
	}
	return out
}

func chunkType(t *testing.T, e sseEvent) (typ, messageID string) {
	var c struct{ Type, MessageID string }
	if err := json.Unmarshal([]byte(e.Data), &c); err != nil {
		t.Fatalf("event %q: %v", e.Data, err)
	}
	return c.Type, c.MessageID
}

func post(t *testing.T, ctx context.Context, url, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// testBinaryGateway runs the HTTP gateway against a running agentd: the SSE
// framing of a whole turn, resuming mid-turn with the same messageId,
// Last-Event-ID without duplicates, 204 when idle, and a disconnect that
// does not stop the turn while POST stop does.
func testBinaryGateway(t *testing.T, bin string) {
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := freeAddr(t), freeAddr(t)
	p := &agentdProc{out: &syncBuffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(bin, "--data", data, "--http", httpAddr, "--nats-listen", natsAddr, "--local-rate", "100")
	p.cmd.Env = os.Environ()
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	startWith(t, p, httpAddr)
	base := "http://" + httpAddr + "/v1/chat"
	body := func(id, text string) string {
		return `{"id":"` + id + `","messages":[{"id":"u-` + id + `","role":"user","parts":[{"type":"text","text":"` + text + `"}]}]}`
	}

	// A whole turn over SSE.
	resp := post(t, t.Context(), base, body("g1", "hello"))
	if resp.StatusCode != 200 || resp.Header.Get("content-type") != "text/event-stream" || resp.Header.Get("x-vercel-ai-ui-message-stream") != "v1" {
		t.Fatalf("POST /v1/chat: %d %v", resp.StatusCode, resp.Header)
	}
	evs := readSSE(t, resp.Body, 0)
	resp.Body.Close()
	if n := len(evs); n < 4 || evs[n-1].Data != "[DONE]" {
		t.Fatalf("events %+v", evs)
	}
	if typ, _ := chunkType(t, evs[0]); typ != "start" {
		t.Fatalf("first event %q", evs[0].Data)
	}
	if typ, _ := chunkType(t, evs[len(evs)-2]); typ != "finish" {
		t.Fatalf("last event before [DONE] %q", evs[len(evs)-2].Data)
	}
	prev := 0
	for _, e := range evs[:len(evs)-1] {
		id, err := strconv.Atoi(e.ID)
		if err != nil || id <= prev {
			t.Fatalf("event ids not increasing cursors: %q after %d", e.ID, prev)
		}
		prev = id
		if strings.Contains(e.Data, "requestId") {
			t.Fatalf("our field leaked to the AI SDK stream: %s", e.Data)
		}
	}
	if resp, err := http.Get(base + "/g1/stream"); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("resume when idle: %v %v", resp.StatusCode, err)
	}

	// A long turn: the client disconnects after a few events; the turn goes
	// on, and a resume replays from the start with the same messageId.
	ctx, cancel := context.WithCancel(t.Context())
	resp = post(t, ctx, base, body("g2", "Tell me a story"))
	first := readSSE(t, resp.Body, 6)
	cancel()
	resp.Body.Close()
	_, messageID := chunkType(t, first[0])
	resp, err := http.Get(base + "/g2/stream")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("resume mid-turn: %v %v", resp.StatusCode, err)
	}
	resumed := readSSE(t, resp.Body, 12)
	resp.Body.Close()
	if typ, id := chunkType(t, resumed[0]); typ != "start" || id != messageID {
		t.Fatalf("resume starts with %q, want start with messageId %s", resumed[0].Data, messageID)
	}
	// Last-Event-ID: only what follows.
	req, _ := http.NewRequest("GET", base+"/g2/stream", nil)
	req.Header.Set("Last-Event-ID", resumed[10].ID)
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("resume after a cursor: %v", err)
	}
	after := readSSE(t, resp.Body, 3)
	if after[0].ID != resumed[11].ID || after[0].Data != resumed[11].Data {
		t.Fatalf("after Last-Event-ID %s got %+v, want %+v", resumed[10].ID, after[0], resumed[11])
	}
	// POST stop ends the turn with abort, then [DONE].
	stop := post(t, t.Context(), base+"/g2/stop", "")
	stop.Body.Close()
	if stop.StatusCode != 200 {
		t.Fatalf("stop: %d", stop.StatusCode)
	}
	rest := readSSE(t, resp.Body, 0)
	resp.Body.Close()
	if n := len(rest); n < 2 || rest[n-1].Data != "[DONE]" {
		t.Fatalf("after stop: %+v", rest)
	}
	if typ, _ := chunkType(t, rest[len(rest)-2]); typ != "abort" {
		t.Fatalf("stopped turn ended with %q, want abort", rest[len(rest)-2].Data)
	}
	// The outcomes show in the metrics.
	mresp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{`forever_chat_turns_total{outcome="completed"} 1`, `forever_chat_tokens_total{kind="output"}`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/g2/stream")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("stopped turn still resumable")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
