package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/internal/waitfor"
)

// testBinaryGateway runs the HTTP gateway against a running agentd: the SSE
// framing of a whole turn, resuming mid-turn with the same messageId,
// Last-Event-ID without duplicates, 204 when idle, and a disconnect that
// does not stop the turn while POST stop does.
func testBinaryGateway(t *testing.T, bin string) {
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	p := &agentdProc{out: &agentdtest.SyncBuffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(bin, "--data", data, "--http", httpAddr, "--nats-listen", natsAddr, "--local-rate", "100")
	p.cmd.Env = os.Environ()
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	startWith(t, p, httpAddr)
	base := "http://" + httpAddr + "/v1/chat"
	body := func(id, text string) string {
		return `{"id":"` + id + `","messages":[{"id":"u-` + id + `","role":"user","parts":[{"type":"text","text":"` + text + `"}]}]}`
	}

	// A whole turn over SSE.
	resp := agentdtest.Post(t, t.Context(), base, body("g1", "hello"))
	if resp.StatusCode != 200 || resp.Header.Get("content-type") != "text/event-stream" || resp.Header.Get("x-vercel-ai-ui-message-stream") != "v1" {
		t.Fatalf("POST /v1/chat: %d %v", resp.StatusCode, resp.Header)
	}
	evs := agentdtest.ReadSSE(t, resp.Body, 0)
	resp.Body.Close()
	if n := len(evs); n < 4 || evs[n-1].Data != "[DONE]" {
		t.Fatalf("events %+v", evs)
	}
	if typ, _ := agentdtest.ChunkType(t, evs[0]); typ != "start" {
		t.Fatalf("first event %q", evs[0].Data)
	}
	if typ, _ := agentdtest.ChunkType(t, evs[len(evs)-2]); typ != "finish" {
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
	resp = agentdtest.Post(t, ctx, base, body("g2", "Tell me a story"))
	first := agentdtest.ReadSSE(t, resp.Body, 6)
	cancel()
	resp.Body.Close()
	_, messageID := agentdtest.ChunkType(t, first[0])
	resp, err := http.Get(base + "/g2/stream")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("resume mid-turn: %v %v", resp.StatusCode, err)
	}
	resumed := agentdtest.ReadSSE(t, resp.Body, 12)
	resp.Body.Close()
	if typ, id := agentdtest.ChunkType(t, resumed[0]); typ != "start" || id != messageID {
		t.Fatalf("resume starts with %q, want start with messageId %s", resumed[0].Data, messageID)
	}
	// Last-Event-ID: only what follows.
	req, _ := http.NewRequest("GET", base+"/g2/stream", nil)
	req.Header.Set("Last-Event-ID", resumed[10].ID)
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("resume after a cursor: %v", err)
	}
	after := agentdtest.ReadSSE(t, resp.Body, 3)
	if after[0].ID != resumed[11].ID || after[0].Data != resumed[11].Data {
		t.Fatalf("after Last-Event-ID %s got %+v, want %+v", resumed[10].ID, after[0], resumed[11])
	}
	// POST stop ends the turn with abort, then [DONE].
	stop := agentdtest.Post(t, t.Context(), base+"/g2/stop", "")
	stop.Body.Close()
	if stop.StatusCode != 200 {
		t.Fatalf("stop: %d", stop.StatusCode)
	}
	rest := agentdtest.ReadSSE(t, resp.Body, 0)
	resp.Body.Close()
	if n := len(rest); n < 2 || rest[n-1].Data != "[DONE]" {
		t.Fatalf("after stop: %+v", rest)
	}
	if typ, _ := agentdtest.ChunkType(t, rest[len(rest)-2]); typ != "abort" {
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
	waitfor.True(t, "the stopped turn to be no longer resumable", func() bool {
		resp, err := http.Get(base + "/g2/stream")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusNoContent
	})
	t.Run("Budget", func(t *testing.T) { testGatewayBudget(t, bin, httpAddr, natsAddr) })
	t.Run("Multitask", func(t *testing.T) { testBinaryMultitask(t, httpAddr, natsAddr) })
}
