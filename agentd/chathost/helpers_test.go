package chathost

import (
	"fmt"
	"maps"
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

// spreadOwners waits until the ids prefix0..prefix15 have owners on each
// of nodes (n1 and n2 when none are named), the same in two readings in a
// row, so the partitions have settled after the last node joined, and
// returns for each node an id it owns.
func spreadOwners(t *testing.T, nc *nats.Conn, prefix string, nodes ...string) map[string]string {
	t.Helper()
	if len(nodes) == 0 {
		nodes = []string{"n1", "n2"}
	}
	var owners map[string]string
	var last map[string]string // id: its owner in the last reading
	waitfor.NoError(t, func() error {
		owners = map[string]string{}
		byID := map[string]string{}
		for i := range 16 {
			id := fmt.Sprintf("%s%d", prefix, i)
			var st host.Status
			command(t, nc, id, "status", ``, &st)
			owners[st.Owner], byID[id] = id, st.Owner
		}
		prev := last
		last = byID
		for _, n := range nodes {
			if owners[n] == "" {
				return fmt.Errorf("the partitions to spread over nodes %v: %v", nodes, owners)
			}
		}
		if !maps.Equal(prev, byID) {
			return fmt.Errorf("the owners to settle: %v, then %v", prev, byID)
		}
		return nil
	})
	return owners
}
