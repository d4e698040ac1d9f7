package main

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/chat"
)

// testBinaryDiskFull: the built binary with a small JetStream store
// (--js-max-store) that another stream fills: a new chat is refused at once
// with 503 and Retry-After (over NATS and HTTP) naming the full store;
// reads and replay of an earlier chat go on; once space returns a chat is
// served again without a restart; and the log verifies clean.
func testBinaryDiskFull(t *testing.T, bin string) {
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	p := startAgentd(t, bin, data, httpAddr, natsAddr, "--local-rate", "-1", "--js-max-store", "48MiB")
	c := dialAgentd(t, natsAddr)
	defer func() {
		if t.Failed() {
			t.Logf("agentd output:\n%s", p.out.String())
		}
	}()

	var first chathost.Reply
	json.Unmarshal(c.command("before", "chat", map[string]string{"text": "hello"}), &first)
	before := waitTerminal(t, c, p, "before", first.StreamID)

	// Ballast in another stream of the same server takes the rest.
	ctx := t.Context()
	js, _ := jetstream.New(c.nc)
	ballast, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BALLAST", Subjects: []string{"ballast"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 512<<10)
	for range 200 {
		if _, err := js.Publish(ctx, "ballast", big); err != nil {
			break
		}
	}
	info, _ := ballast.Info(ctx)
	t.Logf("ballast: %d MiB", info.State.Bytes>>20)

	msg, err := c.nc.Request("forever.cmd.during.chat", []byte(`{"text":"hello"}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code, text := msg.Header.Get("Nats-Service-Error-Code"), msg.Header.Get("Nats-Service-Error"); code != "503" || msg.Header.Get("Retry-After") == "" || !strings.Contains(text, "storage full") {
		t.Errorf("chat with the store full: code %q retry %q: %s, want 503 storage full with Retry-After", code, msg.Header.Get("Retry-After"), text)
	}
	resp := agentdtest.Post(t, ctx, "http://"+httpAddr+"/v1/chat", `{"id":"during2","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"hi"}]}]}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "storage full") {
		t.Errorf("HTTP chat with the store full: %d retry %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	// Reads and replay go on.
	var page struct{ Messages []chat.Message }
	json.Unmarshal(c.command("before", "messages", nil), &page)
	if len(page.Messages) != 2 {
		t.Errorf("messages of the earlier chat with the store full: %+v", page.Messages)
	}
	if got := c.streamChunks("before", first.StreamID); len(got) != len(before) {
		t.Errorf("replay with the store full: %d chunks, want %d", len(got), len(before))
	}

	// Space returns: served again, no restart.
	if err := js.DeleteStream(ctx, "BALLAST"); err != nil {
		t.Fatal(err)
	}
	var after chathost.Reply
	json.Unmarshal(c.command("during", "chat", map[string]string{"text": "hello again"}), &after)
	if cs := waitTerminal(t, c, p, "during", after.StreamID); cs[len(cs)-1].Type != chat.ChunkFinish {
		t.Errorf("chat after space returned ended with %+v", cs[len(cs)-1])
	}
	select {
	case err := <-p.exited:
		t.Fatalf("agentd exited: %v", err)
	default:
	}
	verifyLog(t, c)
}
