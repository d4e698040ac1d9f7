package chathost

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/agents"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/forever-agents/forever/verify"
)

// castingAgent is a chat agent that also takes "cast": Broadcast of the
// payload, as agent code would call it.
type castingAgent struct {
	*Agent
	env *host.Env
}

func (c *castingAgent) HandleCommand(ctx context.Context, cmd host.Command) (any, error) {
	if cmd.Verb == "cast" {
		return map[string]bool{"ok": true}, c.env.Broadcast(ctx, cmd.Data)
	}
	return c.Agent.HandleCommand(ctx, cmd)
}

// newAgentsDaemon is a daemon hosting chat agents (with "cast") on the
// local model, with the gateway, retention and the agents endpoints.
func newAgentsDaemon(t *testing.T, cfg agentd.Config) (*agentd.Daemon, *Type) {
	t.Helper()
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	chats := NewType(llm.NewLocal(llm.LocalConfig{Rate: -1}), nil)
	if err := chats.Attach(d); err != nil {
		t.Fatal(err)
	}
	h := host.New(host.Config{DefaultType: "chat"})
	factory := func(ctx context.Context, env *host.Env) (host.Agent, error) {
		a, err := chats.Factory(ctx, env)
		if err != nil {
			return nil, err
		}
		return &castingAgent{Agent: a.(*Agent), env: env}, nil
	}
	if err := h.Register("chat", factory, append([]string{"cast"}, Verbs...)...); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{h.Attach(d), AttachRetention(d, h, chats), host.AttachHTTP(d, h, host.HTTPConfig{State: chats}), AttachGateway(d, h, chats)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	agentdtest.Start(t, d)
	agentdtest.WaitStatus(t, "http://"+d.HTTPAddr()+"/readyz", 200)
	return d, chats
}

func command(t *testing.T, nc *nats.Conn, agent, verb, data string, out any) {
	t.Helper()
	msg, err := nc.Request("forever.cmd."+agent+"."+verb, []byte(data), 20*time.Second)
	if err != nil {
		t.Fatalf("%s %s: %v", agent, verb, err)
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
		t.Fatalf("%s %s: %s %s", agent, verb, code, msg.Data)
	}
	if out != nil {
		if err := json.Unmarshal(msg.Data, out); err != nil {
			t.Fatalf("%s %s reply %s: %v", agent, verb, msg.Data, err)
		}
	}
}

// chatDone sends a chat and waits for the turn's assistant message.
func chatDone(t *testing.T, nc *nats.Conn, agent, text string) {
	t.Helper()
	chatDoneWith(t, nc, agent, fmt.Sprintf(`{"text":%q}`, text))
}

// chatDoneWith is chatDone with the whole payload.
func chatDoneWith(t *testing.T, nc *nats.Conn, agent, payload string) {
	t.Helper()
	command(t, nc, agent, "chat", payload, nil)
	waitfor.True(t, "the turn of "+agent+" to end", func() bool {
		var page struct{ Messages []chat.Message }
		command(t, nc, agent, "messages", `{}`, &page)
		n := len(page.Messages)
		return n > 0 && page.Messages[n-1].Role == chat.RoleAssistant
	})
}

func sseData(t *testing.T, url string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	ch := make(chan string, 100)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				ch <- d
			}
		}
	}()
	return ch
}

func nextData(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case s, ok := <-ch:
		if !ok {
			t.Fatal("the stream ended")
		}
		return s
	case <-time.After(15 * time.Second):
		t.Fatal("no message in 15s")
	}
	return ""
}

// TestStateAndBroadcastAcrossNodes: two nodes share one JetStream; an
// agent owned by the first publishes chat state changes (the state verb)
// and broadcasts, and a client of the other node's events endpoint gets
// the current state first, then each message in order; so does a late
// client.
func TestStateAndBroadcastAcrossNodes(t *testing.T) {
	c1 := agentdtest.Config(t)
	c1.ServerName = "n1"
	c1.LeaseTTL = 3 * time.Second
	d1, _ := newAgentsDaemon(t, c1)
	c2 := agentdtest.Config(t)
	c2.ServerName, c2.NATSListen, c2.NATSURL, c2.LeaseTTL = "n2", "", d1.NATSURL(), 3*time.Second
	d2, _ := newAgentsDaemon(t, c2)
	nc, err := nats.Connect(d1.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	// An agent n1 owns, once n2 took its share of the partitions.
	agent := spreadOwners(t, nc, "o")["n1"]
	events := "http://" + d2.HTTPAddr() + "/v1/agents/" + agent + "/events"
	early := sseData(t, events)
	if got, want := nextData(t, early), `{"type":"state","version":0,"value":null}`; got != want {
		t.Fatalf("first message on n2: %s, want %s", got, want)
	}
	steps := []struct{ verb, data, want string }{
		{"state", `{"value":{"step":1},"expectVersion":0}`, `{"type":"state","version":1,"value":{"step":1}}`},
		{"cast", `{"progress":0.5}`, `{"type":"broadcast","data":{"progress":0.5}}`},
		{"state", `{"value":{"step":2},"expectVersion":1}`, `{"type":"state","version":2,"value":{"step":2}}`},
		{"cast", `"done"`, `{"type":"broadcast","data":"done"}`},
	}
	for _, s := range steps {
		command(t, nc, agent, s.verb, s.data, nil)
	}
	for _, s := range steps {
		if got := nextData(t, early); got != s.want {
			t.Fatalf("n2's events: %s, want %s", got, s.want)
		}
	}
	late := sseData(t, events)
	if got, want := nextData(t, late), `{"type":"state","version":2,"value":{"step":2}}`; got != want {
		t.Fatalf("late client's first message: %s, want %s", got, want)
	}
}

// TestDeleteChatAgent: a deleted chat agent (two turns, one whose chunks
// retention expired, state and user context) leaves nothing readable:
// no message, no state, no stream, only its tombstones in the log, not in
// the listing; verify finds the log clean; the id then starts a new
// conversation from nothing.
func TestDeleteChatAgent(t *testing.T) {
	cfg := agentdtest.Config(t)
	cfg.ChunkMaxAge = 300 * time.Millisecond
	d, chats := newAgentsDaemon(t, cfg)
	base := "http://" + d.HTTPAddr()
	nc, err := nats.Connect(d.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	chatDoneWith(t, nc, "c1", `{"text":"first","meta":{"user":"ann","tags":["x"]}}`)
	waitfor.NoError(t, func() error {
		list, err := chats.Store().Streams().List("c1")
		if err == nil && len(list) > 0 && list[0].Expired {
			return nil
		}
		return fmt.Errorf("the first stream to expire: %+v %v", list, err)
	})
	chatDone(t, nc, "c1", "second")
	command(t, nc, "c1", "state", `{"value":{"k":1},"expectVersion":0}`, nil)
	chatDone(t, nc, "c2", "another agent")

	if code, body := agentdtest.Get(t, base+"/v1/agents?user=ann"); code != 200 || !strings.Contains(body, `"agent":"c1"`) {
		t.Fatalf("listing before delete: %d %s", code, body)
	}
	var rep host.DeleteReply
	command(t, nc, "c1", "delete", ``, &rep)

	var page struct{ Messages []chat.Message }
	command(t, nc, "c1", "messages", `{}`, &page)
	if len(page.Messages) != 0 {
		t.Fatalf("messages after delete: %+v", page.Messages)
	}
	if code, body := agentdtest.Get(t, base+"/v1/chat/c1/messages"); code != 200 || strings.TrimSpace(body) != `{"messages":[],"next":""}` {
		t.Fatalf("GET messages after delete: %d %s", code, body)
	}
	var st struct{ Version int }
	command(t, nc, "c1", "state", ``, &st)
	if st.Version != 0 {
		t.Fatalf("state after delete: %+v", st)
	}
	if list, _ := chats.Store().Streams().List("c1"); len(list) != 0 {
		t.Fatalf("streams after delete: %+v", list)
	}
	if code, _ := agentdtest.Get(t, base+"/v1/chat/c1/stream"); code != http.StatusNoContent && code != http.StatusNotFound {
		t.Fatalf("resume after delete: %d", code)
	}
	lg, err := eventlog.Open(t.Context(), eventlog.Config{Conn: nc, Bind: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []eventlog.Filter{{Agent: "c1"}, {Agent: "c1", Chunks: true}} {
		evs, err := lg.Read(t.Context(), f, 0, 0)
		if err != nil || len(evs) != 1 || evs[0].Type != eventlog.TypeDeleted {
			t.Fatalf("%+v after delete: %d events %v", f, len(evs), err)
		}
	}
	code, body := agentdtest.Get(t, base+"/v1/agents?user=ann")
	if code != 200 || strings.Contains(body, `"agent":"c1"`) {
		t.Fatalf("listing after delete: %d %s", code, body)
	}
	r, err := verify.Check(t.Context(), lg, verify.Options{})
	if err != nil || !r.OK() {
		t.Fatalf("verify after delete: %v\n%s", err, r)
	}

	chatDone(t, nc, "c1", "hello again")
	command(t, nc, "c1", "messages", `{}`, &page)
	if len(page.Messages) != 2 || page.Messages[0].Role != "user" {
		t.Fatalf("the id's new conversation: %+v", page.Messages)
	}
	command(t, nc, "c1", "state", `{"value":{"k":2},"expectVersion":0}`, nil)
	// The turn's fiber ends just after its stream and messages: the entry
	// turns idle then.
	var e agents.Entry
	waitfor.True(t, "c1's entry to leave running", func() bool {
		command(t, nc, "c1", "meta", ``, &e)
		return e.Status != agents.StatusRunning
	})
	if e.User != "" || e.Status != agents.StatusIdle {
		t.Fatalf("the id's new entry: %+v", e)
	}
	if r, err := verify.Check(t.Context(), lg, verify.Options{}); err != nil || !r.OK() {
		t.Fatalf("verify after the id's reuse: %v\n%s", err, r)
	}
}
