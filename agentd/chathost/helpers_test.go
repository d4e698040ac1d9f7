package chathost

import (
	"testing"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat/llm"
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
