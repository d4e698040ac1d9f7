package chathost

import (
	"fmt"
	"testing"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/nats-io/nats.go"
)

// newChatDaemon returns a daemon on cfg hosting the chat type on the local
// model at rate words/s, not started. attach adds more (the gateway,
// retention) once the host is attached.
func newChatDaemon(t *testing.T, cfg agentd.Config, rate float64, attach ...func(*agentd.Daemon, *host.Host, *Type) error) (*agentd.Daemon, *Type) {
	t.Helper()
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	chats := NewType(llm.NewLocal(llm.LocalConfig{Rate: rate}), nil)
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
	for _, fn := range attach {
		if err := fn(d, h, chats); err != nil {
			t.Fatal(err)
		}
	}
	return d, chats
}

// waitTurnEnded waits until agent has no active turn in chats' store.
func waitTurnEnded(t *testing.T, chats *Type, agent string) {
	t.Helper()
	waitfor.True(t, agent+"'s turn to end", func() bool {
		_, active, err := chats.Store().ActiveTurn(agent)
		return err == nil && !active
	})
}

// spreadOwners waits until the ids prefix0..prefix15 have owners on both
// nodes n1 and n2, and returns for each node an id it owns.
func spreadOwners(t *testing.T, nc *nats.Conn, prefix string) map[string]string {
	t.Helper()
	var owners map[string]string
	waitfor.NoError(t, func() error {
		owners = map[string]string{}
		for i := range 16 {
			id := fmt.Sprintf("%s%d", prefix, i)
			var st host.Status
			command(t, nc, id, "status", ``, &st)
			owners[st.Owner] = id
		}
		if owners["n1"] == "" || owners["n2"] == "" {
			return fmt.Errorf("the partitions to spread over both nodes: %v", owners)
		}
		return nil
	})
	return owners
}
