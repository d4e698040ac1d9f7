package chathost

import (
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
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/internal/waitfor"
)

// TestGatewayReadsOnOwner: three nodes of a sharded cluster with owned
// views, each node's views holding only its own partitions. A chat posted
// to the gateway of a node that does not own the agent streams to
// [DONE]; on the third node, which neither owns it nor started the turn,
// the gateway's reads (the resume of the stream, the messages), the
// streams verb's one-stream read and the events stream's first state
// answer what the owner's views hold (host.ReadsOnOwner). A sub-agent
// call whose child is owned by another node than its parent's gets the
// child's answer: the parent reads the child's turn on the child's owner
// (the child-turn verb), not in its own views, which do not hold it.
func TestGatewayReadsOnOwner(t *testing.T) {
	withHTTP := func(d *agentd.Daemon, h *host.Host, ct *Type) error {
		return host.AttachHTTP(d, h, host.HTTPConfig{State: ct})
	}
	agentTool, err := chat.AgentTool()
	if err != nil {
		t.Fatal(err)
	}
	tools, err := chat.NewTools(agentTool)
	if err != nil {
		t.Fatal(err)
	}
	withAgentTool := func(_ *agentd.Daemon, _ *host.Host, ct *Type) error {
		ct.config = func(c *chat.Config) { c.Tools = tools }
		return nil
	}
	var chats []*Type
	var ds []*agentd.Daemon
	for i, name := range []string{"n1", "n2", "n3"} {
		c := agentdtest.Config(t)
		c.ServerName, c.LeaseTTL, c.Shards, c.Partitions = name, 3*time.Second, 4, 8 // owned views by default
		if i > 0 {
			c.NATSListen, c.NATSURL = "", ds[0].NATSURL()
		}
		d, ct := newChatDaemon(t, c, -1, AttachGateway, withHTTP, withAgentTool)
		chats = append(chats, ct)
		agentdtest.Start(t, d)
		agentdtest.WaitStatus(t, "http://"+d.HTTPAddr()+"/readyz", 200)
		ds = append(ds, d)
	}
	nc, err := nats.Connect(ds[0].NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	owners := spreadOwners(t, nc, "g", "n1", "n2", "n3")
	agent := owners["n1"]
	var st host.Status
	command(t, nc, agent, "status", ``, &st)
	if st.Owner != "n1" {
		t.Fatalf("agent %s is owned by %s, want n1", agent, st.Owner)
	}
	n2, n3 := "http://"+ds[1].HTTPAddr(), "http://"+ds[2].HTTPAddr()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp := agentdtest.Post(t, ctx, n2+"/v1/chat", `{"id":"`+agent+`","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"hello"}]}]}`)
	evs := agentdtest.ReadSSE(t, resp.Body, 0)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(evs) == 0 || evs[len(evs)-1].Data != "[DONE]" {
		t.Fatalf("chat posted to n2 (not the owner): %d, %d events, want 200 ending with [DONE]: %+v", resp.StatusCode, len(evs), evs)
	}

	// n3's resume of the ended stream from its start replays it.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n3+"/v1/chat/"+agent+"/stream?after=0", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	replayed := agentdtest.ReadSSE(t, resp.Body, 0)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(replayed) != len(evs) || replayed[len(replayed)-1].Data != "[DONE]" {
		t.Fatalf("n3's resume after 0: %d, %d events, want 200 and the %d events of the chat", resp.StatusCode, len(replayed), len(evs))
	}
	// Without a cursor: the turn ended, nothing to resume.
	if code, body := agentdtest.Get(t, n3+"/v1/chat/"+agent+"/stream"); code != http.StatusNoContent {
		t.Fatalf("n3's resume without a cursor: %d %s, want 204", code, body)
	}

	code, body := agentdtest.Get(t, n3+"/v1/chat/"+agent+"/messages")
	var msgs struct {
		Messages []struct{ ID, Role string }
		Next     string
	}
	if err := json.Unmarshal([]byte(body), &msgs); code != 200 || err != nil || len(msgs.Messages) != 2 || msgs.Messages[0].ID != "u1" {
		t.Fatalf("n3's messages: %d %s, want the user message and the answer", code, body)
	}
	code, body = agentdtest.Get(t, n3+"/v1/chat/"+agent+"/messages?limit=1")
	if err := json.Unmarshal([]byte(body), &msgs); code != 200 || err != nil || len(msgs.Messages) != 1 || msgs.Next != "u1" {
		t.Fatalf("n3's first page of messages: %d %s, want u1 and next u1", code, body)
	}

	var page StreamsPage
	command(t, nc, agent, "streams", `{"limit":1}`, &page)
	if len(page.Streams) != 1 || page.Streams[0].Status == "" {
		t.Fatalf("streams: %+v", page)
	}
	id := page.Streams[0].Stream
	command(t, nc, agent, "streams", `{"stream":"`+id+`"}`, &page)
	if len(page.Streams) != 1 || page.Streams[0].Stream != id {
		t.Fatalf("streams of stream %s: %+v", id, page)
	}
	command(t, nc, agent, "streams", `{"stream":"none"}`, &page)
	if len(page.Streams) != 0 {
		t.Fatalf("streams of an unknown stream: %+v, want none", page)
	}

	// A fork onto another partition's id is refused, saying why: its
	// owner's views would not hold the parent's rows.
	m, err := nc.Request("forever.cmd."+agent+".fork", []byte(`{"to":"`+owners["n2"]+`"}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get("Nats-Service-Error-Code") != "400" || !strings.Contains(m.Header.Get("Nats-Service-Error"), "--owned-views=false") {
		t.Fatalf("fork across partitions: %v %s, want a 400 naming --owned-views=false", m.Header, m.Data)
	}

	command(t, nc, agent, "state", `{"value":{"step":1},"expectVersion":0}`, nil)
	if got, want := nextData(t, sseData(t, n3+"/v1/agents/"+agent+"/events")), `{"type":"state","version":1,"value":{"step":1}}`; got != want {
		t.Fatalf("n3's events of %s start with %s, want %s", agent, got, want)
	}

	// A parent on n1 calls a child owned by n2.
	child := owners["n2"]
	// Sent again while refused with 409 "send the command again": a lease
	// lapsed under load leaves the first turn's fiber to recovery, which
	// holds the agent's turn until it settles.
	var reply Reply
	waitfor.NoError(t, func() error {
		m, err := nc.Request("forever.cmd."+agent+".chat", []byte(`{"text":"/agent `+child+` tell me a story"}`), 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if code := m.Header.Get("Nats-Service-Error-Code"); code == "409" && strings.Contains(string(m.Data), "send the command again") {
			return fmt.Errorf("chat refused: %s", m.Data)
		} else if code != "" {
			t.Fatalf("%s chat: %s %s", agent, code, m.Data)
		}
		return json.Unmarshal(m.Data, &reply)
	})
	// Read on whichever node owns the parent now: under load a 3 s lease
	// can move it off n1, whose views then no longer follow it.
	var links []chat.ChildLink
	waitfor.True(t, "the sub-agent call of "+agent+" to end", func() bool {
		for _, ct := range chats {
			links, err = ct.Store().Links(agent, reply.RequestID)
			if err == nil && len(links) == 1 && links[0].Ended() {
				return true
			}
		}
		return false
	})
	if l := links[0]; l.Agent != child || l.Status != chat.LinkCompleted || len(l.Output) == 0 {
		t.Fatalf("the call of child %s on another node ended %s (%s), want completed with its answer: %+v", child, l.Status, l.Error, l)
	}
}
