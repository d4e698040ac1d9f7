package chathost

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat"
)

// TestChatRunsOnce: a chat command sent again with its requestId, or with
// the same Idempotency-Key header, runs once and gets the first reply,
// its cursor a string; without either, each command is a new turn.
func TestChatRunsOnce(t *testing.T) {
	d, chats := newChatDaemon(t, agentdtest.Config(t), -1)
	agentdtest.Start(t, d)
	agentdtest.WaitStatus(t, "http://"+d.HTTPAddr()+"/readyz", 200)
	nc, err := nats.Connect(d.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	send := func(agent, payload, key string) (Reply, json.RawMessage) {
		t.Helper()
		m := nats.NewMsg("forever.cmd." + agent + ".chat")
		m.Data = []byte(payload)
		if key != "" {
			m.Header.Set(host.HeaderIdempotencyKey, key)
		}
		resp, err := nc.RequestMsg(m, 10*time.Second)
		if err != nil || resp.Header.Get("Nats-Service-Error-Code") != "" {
			t.Fatalf("chat %s: %v %s", payload, err, resp.Data)
		}
		var r Reply
		if err := json.Unmarshal(resp.Data, &r); err != nil {
			t.Fatal(err)
		}
		return r, resp.Data
	}
	turns := func(agent string) int {
		t.Helper()
		waitTurnEnded(t, chats, agent)
		msgs, _, err := chats.Store().Messages(agent, chat.Page{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range msgs {
			if m.Role == "user" {
				n++
			}
		}
		return n
	}
	first, raw := send("once", `{"text":"hello","requestId":"req-1"}`, "")
	var fields map[string]any
	json.Unmarshal(raw, &fields)
	if _, ok := fields["cursor"].(string); !ok {
		t.Errorf("the reply's cursor is %T, want a string of digits: %s", fields["cursor"], raw)
	}
	turns("once")
	again, _ := send("once", `{"text":"hello","requestId":"req-1"}`, "")
	if again != first || turns("once") != 1 {
		t.Errorf("a chat sent again with its requestId: reply %+v (first %+v), %d user messages", again, first, turns("once"))
	}
	k1, _ := send("keyed", `{"text":"hello"}`, "key-1")
	turns("keyed")
	k2, _ := send("keyed", `{"text":"hello"}`, "key-1")
	if k2.RequestID != k1.RequestID || k2.StreamID != k1.StreamID || turns("keyed") != 1 {
		t.Errorf("a chat sent again with its Idempotency-Key: %+v then %+v, %d user messages", k1, k2, turns("keyed"))
	}
	send("plain", `{"text":"hello"}`, "")
	turns("plain")
	send("plain", `{"text":"hello"}`, "")
	if n := turns("plain"); n != 2 {
		t.Errorf("two chats without an identity: %d user messages, want 2", n)
	}
}
