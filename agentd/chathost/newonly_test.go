package chathost

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/chat"
)

// TestHistoryStoredOnce: a client that sends the whole conversation with
// every request, as the AI SDK's useChat does, makes each turn store only
// what is new. The log's growth per turn at turn 20 is that of turn 2
// (within 1.2x), not 10 times it; a body whose history is 5 MB, more than
// one event holds and more than the body limit, gets its answer and adds
// one user and one assistant message.
func TestHistoryStoredOnce(t *testing.T) {
	cfg := agentdtest.Config(t)
	d, _ := newChatDaemon(t, cfg, -1, AttachGateway)
	agentdtest.Start(t, d)
	base := "http://" + d.HTTPAddr()
	agentdtest.WaitStatus(t, base+"/readyz", 200)
	nc, err := nats.Connect(d.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stored := func() uint64 {
		t.Helper()
		s, err := js.Stream(t.Context(), "FOREVER_EVENTS")
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Bytes
	}
	conversation := func() []json.RawMessage {
		t.Helper()
		code, body := agentdtest.Get(t, base+"/v1/chat/long/messages")
		if code != 200 {
			t.Fatalf("messages: %d %s", code, body)
		}
		var page struct{ Messages []json.RawMessage }
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatal(err)
		}
		return page.Messages
	}
	turn := func(history []json.RawMessage, i int) {
		t.Helper()
		user, _ := json.Marshal(chat.Message{ID: fmt.Sprintf("u%d", i), Role: chat.RoleUser,
			Parts: []chat.Part{{Type: "text", Text: fmt.Sprintf("turn %d ", i) + strings.Repeat("w", 2000)}}})
		body, _ := json.Marshal(map[string]any{"id": "long", "trigger": "submit-message", "messages": append(history, user)})
		resp := agentdtest.Post(t, t.Context(), base+"/v1/chat", string(body))
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("turn %d (a body of %d bytes): %d %s", i, len(body), resp.StatusCode, b)
		}
		if evs := agentdtest.ReadSSE(t, resp.Body, 0); len(evs) == 0 || evs[len(evs)-1].Data != "[DONE]" {
			t.Fatalf("turn %d did not finish: %+v", i, evs)
		}
	}
	var growth []uint64
	for i := 1; i <= 20; i++ {
		before := stored()
		turn(conversation(), i)
		growth = append(growth, stored()-before)
	}
	mean := func(g []uint64) float64 {
		var sum uint64
		for _, b := range g {
			sum += b
		}
		return float64(sum) / float64(len(g))
	}
	// Turns differ by a few KiB of other records (heartbeats, stashes): the
	// means of five turns are compared.
	if early, late := mean(growth[1:6]), mean(growth[15:20]); late > 1.5*early {
		t.Fatalf("turns 16-20 stored %.0f bytes each, turns 2-6 %.0f: more than 1.5x (all: %v)", late, early, growth)
	}

	// A 5 MB history, past the 4 MiB body limit, that the server never
	// stored (a client's own), then the new message: answered, and only
	// the new message and its answer stored.
	history := conversation()
	pad, _ := json.Marshal(strings.Repeat("h", 100<<10))
	for i := range 50 {
		history = append(history, json.RawMessage(fmt.Sprintf(`{"id":"old%d","role":"user","parts":[{"type":"text","text":%s}]}`, i, pad)))
	}
	n := len(conversation())
	before := stored()
	turn(history, 21)
	if got := len(conversation()); got != n+2 {
		t.Fatalf("after a 5 MB history: %d messages, want %d", got, n+2)
	}
	if grew := stored() - before; float64(grew) > 4*mean(growth) {
		t.Fatalf("a turn with a 5 MB history stored %d bytes, a plain one %.0f", grew, mean(growth))
	}
}
