package chathost

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/demo"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
)

// TestToolsVerb: the tools verb lists a chat agent's server tools, sorted
// by name, with their safety, when they wait for approval and where they
// come from.
func TestToolsVerb(t *testing.T) {
	d, err := agentd.New(agentdtest.Config(t))
	if err != nil {
		t.Fatal(err)
	}
	tools, err := demo.Tools(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pay, err := chat.NewTool("pay", "Pays.", func(context.Context, struct{}) (struct{}, error) { return struct{}{}, nil },
		chat.AlwaysNeedsApproval())
	if err != nil {
		t.Fatal(err)
	}
	all, err := chat.NewTools(append([]*chat.Tool{pay}, lookupAll(tools, demo.ToolClock, demo.ToolNote)...)...)
	if err != nil {
		t.Fatal(err)
	}
	chats := NewType(llm.NewLocal(llm.LocalConfig{Rate: -1}), func(c *chat.Config) { c.Tools = all })
	if err := chats.Attach(d); err != nil {
		t.Fatal(err)
	}
	h := host.New(host.Config{DefaultType: "chat"})
	if err := h.Register("chat", chats.Factory, Verbs...); err != nil {
		t.Fatal(err)
	}
	if err := h.Attach(d); err != nil {
		t.Fatal(err)
	}
	agentdtest.Start(t, d)
	nc, err := nats.Connect(d.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var reply ToolsReply
	command(t, nc, "a1", "tools", ``, &reply)
	want := []chat.ToolInfo{
		{Name: demo.ToolClock, Safety: "idempotent", Approval: chat.ApprovalNever, Source: demo.Source},
		{Name: demo.ToolNote, Safety: "unsafe", Approval: chat.ApprovalByInput, Source: demo.Source},
		{Name: "pay", Safety: "unsafe", Approval: chat.ApprovalAlways, Source: chat.SourceGo},
	}
	if len(reply.Tools) != len(want) {
		t.Fatalf("tools %+v, want %+v", reply.Tools, want)
	}
	for i, w := range want {
		got := reply.Tools[i]
		got.Description = ""
		if got != w {
			t.Errorf("tool %d: %+v, want %+v", i, got, w)
		}
	}
}

func lookupAll(ts *chat.Tools, names ...string) []*chat.Tool {
	var out []*chat.Tool
	for _, n := range names {
		if t, ok := ts.Lookup(n); ok {
			out = append(out, t)
		}
	}
	return out
}
