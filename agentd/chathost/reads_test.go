package chathost

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/internal/waitfor"
)

type echoInput struct {
	Text string `json:"text"`
}

// newReadsDaemon starts a chat daemon whose "echo" tool always needs
// approval, with every HTTP read attached.
func newReadsDaemon(t *testing.T) (*agentd.Daemon, *nats.Conn) {
	t.Helper()
	echo, err := chat.NewTool("echo", "Echoes its text.", func(_ context.Context, in echoInput) (echoInput, error) {
		return in, nil
	}, chat.AlwaysNeedsApproval())
	if err != nil {
		t.Fatal(err)
	}
	tools, err := chat.NewTools(echo)
	if err != nil {
		t.Fatal(err)
	}
	d, err := agentd.New(agentdtest.Config(t))
	if err != nil {
		t.Fatal(err)
	}
	chats := NewType(llm.NewLocal(llm.LocalConfig{Rate: -1}), func(c *chat.Config) { c.Tools = tools })
	h := host.New(host.Config{DefaultType: "chat"})
	for _, err := range []error{chats.Attach(d), h.Register("chat", chats.Factory, Verbs...), h.Attach(d),
		host.AttachHTTP(d, h, host.HTTPConfig{State: chats}), AttachReads(d, h)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	agentdtest.Start(t, d)
	agentdtest.WaitStatus(t, "http://"+d.HTTPAddr()+"/readyz", 200)
	nc, err := nats.Connect(d.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return d, nc
}

func get(t *testing.T, url string, out any) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == 200 && out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("GET %s: %s: %v", url, b, err)
		}
	}
	return resp.StatusCode, string(b)
}

// TestConsoleReads: a call that waits for approval is listed by the
// approvals verb and its GET until it is answered (POST
// /v1/agents/{id}/approvals/{toolCallId}); the streams verb and
// GET page the agent's streams newest first; a stream's chunks replay
// from any cursor in pages that end with done; usage rolls the turns up.
// Bad cursors and limits are 400, an unknown stream 404.
func TestConsoleReads(t *testing.T) {
	d, nc := newReadsDaemon(t)
	base := "http://" + d.HTTPAddr() + "/v1/agents/c1"
	chatDone(t, nc, "c1", "hello there")
	chatDone(t, nc, "c1", `/tool echo {"text":"approve me"}`)

	var ap Approvals
	command(t, nc, "c1", "approvals", `{}`, &ap)
	var hap Approvals
	if code, body := get(t, base+"/approvals", &hap); code != 200 {
		t.Fatalf("GET approvals: %d %s", code, body)
	}
	if len(ap.Approvals) != 1 || ap.Approvals[0].ToolName != "echo" || ap.Approvals[0].ApprovalID == "" ||
		len(hap.Approvals) != 1 || hap.Approvals[0].ToolCallID != ap.Approvals[0].ToolCallID {
		t.Fatalf("approvals: NATS %+v, HTTP %+v", ap, hap)
	}
	for body, want := range map[string]int{`{}`: 400, `nope`: 400, `{"approved":true}`: 200} {
		resp, err := http.Post(base+"/approvals/"+ap.Approvals[0].ToolCallID, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("POST approval %s: %d %s, want %d", body, resp.StatusCode, b, want)
		}
	}
	waitfor.True(t, "no approval pending after approve", func() bool {
		command(t, nc, "c1", "approvals", `{}`, &ap)
		return len(ap.Approvals) == 0
	})

	// The console's timeline reads the log with type=fiber.: every turn's
	// fiber ends in it, by a fiber.completed or, from record format 11,
	// the turn.completed that carries its end (completes).
	waitfor.NoError(t, func() error {
		var lp host.LogPage
		command(t, nc, "c1", "log", `{"type":"fiber.","limit":1000}`, &lp)
		running := map[string]bool{}
		for _, e := range lp.Events {
			var f struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(e.Data, &f)
			switch {
			case e.Type == "fiber.started":
				running[f.ID] = true
			case e.Type == "fiber.completed":
				delete(running, f.ID)
			case e.Completes != "":
				delete(running, e.Completes)
			}
		}
		if len(running) != 0 || len(lp.Events) == 0 {
			return fmt.Errorf("fibers not ended in the log page: %v of %+v", running, lp.Events)
		}
		return nil
	})

	var all StreamsPage
	command(t, nc, "c1", "streams", `{}`, &all)
	if len(all.Streams) < 2 || all.Next != "" {
		t.Fatalf("streams: %+v", all)
	}
	var paged []Stream
	for cursor := ""; ; {
		var p StreamsPage
		if code, body := get(t, base+"/streams?limit=1&cursor="+cursor, &p); code != 200 {
			t.Fatalf("GET streams: %d %s", code, body)
		}
		paged = append(paged, p.Streams...)
		if cursor = p.Next; cursor == "" {
			break
		}
	}
	if len(paged) != len(all.Streams) {
		t.Fatalf("paged %d streams, %d in all", len(paged), len(all.Streams))
	}
	for i := range paged {
		if paged[i].Stream != all.Streams[i].Stream || (i > 0 && paged[i].StartedAt.After(paged[i-1].StartedAt)) {
			t.Fatalf("stream %d: paged %+v, all %+v", i, paged[i], all.Streams[i])
		}
	}

	// The first turn's stream, whole, then from each cursor in pages of 2.
	first := all.Streams[len(all.Streams)-1]
	var whole ChunksPage
	if code, body := get(t, base+"/streams/"+first.Stream+"/chunks", &whole); code != 200 {
		t.Fatalf("GET chunks: %d %s", code, body)
	}
	if !whole.Done || len(whole.Chunks) < 3 || !whole.Chunks[len(whole.Chunks)-1].Chunk.Terminal() {
		t.Fatalf("whole stream: %+v", whole)
	}
	var got []string
	for after := "0"; ; {
		var p ChunksPage
		if code, body := get(t, base+"/streams/"+first.Stream+"/chunks?limit=2&after="+after, &p); code != 200 {
			t.Fatalf("GET chunks after %s: %d %s", after, code, body)
		}
		for _, c := range p.Chunks {
			got = append(got, c.Cursor)
		}
		after = p.Next
		if p.Done {
			break
		}
	}
	if len(got) != len(whole.Chunks) {
		t.Fatalf("paged cursors %v, whole %d chunks", got, len(whole.Chunks))
	}
	for i, c := range whole.Chunks {
		if got[i] != c.Cursor {
			t.Fatalf("cursor %d: paged %s, whole %s", i, got[i], c.Cursor)
		}
	}

	var u chat.Usage
	command(t, nc, "c1", "usage", `{}`, &u)
	var hu chat.Usage
	get(t, base+"/usage", &hu)
	if u.Turns < 2 || u.Output == 0 || hu != u {
		t.Fatalf("usage: NATS %+v, HTTP %+v", u, hu)
	}

	for url, want := range map[string]int{
		base + "/streams?cursor=nope":                                                      400,
		base + "/streams?limit=0":                                                          400,
		base + "/streams/" + first.Stream + "/chunks?after=x":                              400,
		base + "/streams/" + first.Stream + "/chunks?limit=0":                              400,
		base + "/streams/nosuch/chunks":                                                    404,
		"http://" + d.HTTPAddr() + "/v1/agents/nobody/streams/" + first.Stream + "/chunks": 404,
	} {
		if code, body := get(t, url, nil); code != want || !strings.Contains(body, `"error"`) {
			t.Errorf("GET %s: %d %s, want %d", url, code, body, want)
		}
	}
}
