package chathost

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/internal/waitfor"
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
	cfg := agentdtest.Config(t)
	cfg.PebbleFS = errorfs.Wrap(vfs.Default, full)
	d, _ := newChatDaemon(t, cfg, 100, AttachGateway)
	agentdtest.Start(t, d)
	base := "http://" + d.HTTPAddr()
	agentdtest.WaitStatus(t, base+"/readyz", 200)
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
		if evs := agentdtest.ReadSSE(t, resp.Body, 0); len(evs) == 0 || evs[len(evs)-1].Data != "[DONE]" {
			t.Fatalf("turn did not finish: %+v", evs)
		}
	}
	finish(agentdtest.Post(t, t.Context(), base+"/v1/chat", chatBody("c1")))

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
	evs := agentdtest.ReadSSE(t, resp.Body, 0)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(evs) == 0 || evs[len(evs)-1].Data != "[DONE]" {
		t.Errorf("replay with Pebble full: %d %+v", resp.StatusCode, evs)
	}

	full.Off()
	waitfor.True(t, "chats to be taken again once space returned", func() bool {
		resp := agentdtest.Post(t, t.Context(), base+"/v1/chat", chatBody("c5"))
		if resp.StatusCode == http.StatusServiceUnavailable {
			resp.Body.Close()
			return false
		}
		finish(resp)
		return true
	})
	code, body := agentdtest.Get(t, base+"/v1/chat/c1/messages")
	if code != 200 || !strings.Contains(body, `"role":"assistant"`) {
		t.Errorf("c1's messages after the disk filled and emptied: %d %s", code, body)
	}
	// The turn that was streaming as the disk filled completed once it
	// emptied.
	waitfor.NoError(t, func() error {
		code, body := agentdtest.Get(t, base+"/v1/chat/c2/messages")
		if code == 200 && strings.Contains(body, `"role":"assistant"`) {
			return nil
		}
		return fmt.Errorf("the chat paused by the full disk to complete: %d %s", code, body)
	})
}
