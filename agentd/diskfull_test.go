package agentd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/forever-agents/forever/chat"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPebbleDiskFull: when Pebble's disk is full (ENOSPC injected through
// Config.PebbleFS on the real disk), a new chat is refused at once with 503
// and Retry-After over HTTP and a 503 micro error over NATS, naming the
// cause; a finished chat's stream still replays; agentd does not crash; and
// once space returns chats are served again by themselves, with the earlier
// conversation intact.
func TestPebbleDiskFull(t *testing.T) {
	full := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind.ReadOrWrite() == errorfs.OpIsWrite && op.Kind != errorfs.OpRemove && op.Kind != errorfs.OpFileClose {
			return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
		}
		return nil
	})}
	cfg := testConfig(t)
	cfg.PebbleFS = errorfs.Wrap(vfs.Default, full)
	d, _ := newChatDaemon(t, cfg, 100, AttachGateway)
	startDaemon(t, d)
	base := "http://" + d.HTTPAddr()
	waitStatus(t, base+"/readyz", 200)
	chatBody := func(id string) string {
		return `{"id":"` + id + `","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"hi"}]}]}`
	}
	finish := func(resp *http.Response) {
		t.Helper()
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("chat: %d %s", resp.StatusCode, b)
		}
		if evs := readSSE(t, resp.Body, 0); len(evs) == 0 || evs[len(evs)-1].Data != "[DONE]" {
			t.Fatalf("turn did not finish: %+v", evs)
		}
	}
	finish(post(t, t.Context(), base+"/v1/chat", chatBody("c1")))

	nc, err := nats.Connect(d.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	// A turn streams (at 100 words/s) as the disk fills: the first view
	// write that fails stalls the views, and from then on new work is
	// refused. The turn pauses (it waits for the views) and completes once
	// space returns.
	msg, err := nc.Request("forever.cmd.c2.chat", []byte(`{"text":"Tell me a story about a lighthouse."}`), 10*time.Second)
	if err != nil || msg.Header.Get("Nats-Service-Error-Code") != "" {
		t.Fatalf("chat c2: %v %v", err, msg)
	}
	full.On()
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat", strings.NewReader(chatBody(fmt.Sprintf("c3-%d", i))))
		req.Header.Set("content-type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		var b []byte
		if err == nil {
			b, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		cancel()
		if err == nil && resp.StatusCode == http.StatusServiceUnavailable {
			if resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "no space left") {
				t.Errorf("503 without Retry-After or cause: %q %s", resp.Header.Get("Retry-After"), b)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("chat with Pebble full: %v %s, want 503", err, b)
		}
	}
	msg, err = nc.Request("forever.cmd.c4.chat", []byte(`{"text":"hi"}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "503" || !strings.Contains(msg.Header.Get("Nats-Service-Error"), "storage full") {
		t.Errorf("NATS chat with Pebble full: code %q error %q, want 503 storage full", code, msg.Header.Get("Nats-Service-Error"))
	}
	// Replay of the finished chat reads JetStream, not the stalled views.
	resp, err := http.Get(base + "/v1/chat/c1/stream?after=0")
	if err != nil {
		t.Fatal(err)
	}
	evs := readSSE(t, resp.Body, 0)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(evs) == 0 || evs[len(evs)-1].Data != "[DONE]" {
		t.Errorf("replay with Pebble full: %d %+v", resp.StatusCode, evs)
	}

	full.Off()
	deadline = time.Now().Add(20 * time.Second)
	for {
		resp := post(t, t.Context(), base+"/v1/chat", chatBody("c5"))
		if resp.StatusCode != http.StatusServiceUnavailable {
			finish(resp)
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("chats still refused 20 s after space returned")
		}
		time.Sleep(200 * time.Millisecond)
	}
	code, body := get(t, base+"/v1/chat/c1/messages")
	if code != 200 || !strings.Contains(body, `"role":"assistant"`) {
		t.Errorf("c1's messages after the disk filled and emptied: %d %s", code, body)
	}
	// The turn that was streaming as the disk filled completed once it
	// emptied.
	deadline = time.Now().Add(20 * time.Second)
	for {
		code, body := get(t, base+"/v1/chat/c2/messages")
		if code == 200 && strings.Contains(body, `"role":"assistant"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the chat paused by the full disk did not complete: %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// testBinaryDiskFull: the built binary with a small JetStream store
// (--js-max-store) that another stream fills: a new chat is refused at once
// with 503 and Retry-After (over NATS and HTTP) naming the full store;
// reads and replay of an earlier chat go on; once space returns a chat is
// served again without a restart; and the log verifies clean.
func testBinaryDiskFull(t *testing.T, bin string) {
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := freeAddr(t), freeAddr(t)
	p := startAgentd(t, bin, data, httpAddr, natsAddr, "--local-rate", "-1", "--js-max-store", "48MiB")
	c := dialAgentd(t, natsAddr)
	defer func() {
		if t.Failed() {
			t.Logf("agentd output:\n%s", p.out.String())
		}
	}()

	var first ChatReply
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
	resp := post(t, ctx, "http://"+httpAddr+"/v1/chat", `{"id":"during2","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"hi"}]}]}`)
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
	var after ChatReply
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
