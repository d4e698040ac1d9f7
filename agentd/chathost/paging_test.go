package chathost

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/chat"
)

// TestMessagesPagesByBytes: the messages verb over NATS pages by bytes as
// well as by count. Three chats of 400 KiB (each under the command limit)
// make a conversation of more than the server's 1 MiB max payload: every
// reply fits in it, and next continues the page until every message was
// read once. (A page over the max payload used to get no answer at all.)
func TestMessagesPagesByBytes(t *testing.T) {
	cfg := agentdtest.Config(t)
	d, _ := newChatDaemon(t, cfg, -1)
	agentdtest.Start(t, d)
	agentdtest.WaitStatus(t, "http://"+d.HTTPAddr()+"/readyz", 200)
	nc, err := nats.Connect(d.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	request := func(verb string, body any) *nats.Msg {
		t.Helper()
		data, _ := json.Marshal(body)
		msg, err := nc.Request("forever.cmd.big."+verb, data, 20*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", verb, err)
		}
		if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
			t.Fatalf("%s: %s %s", verb, code, msg.Data)
		}
		return msg
	}
	text := strings.Repeat("lighthouse ", 400<<10/11)
	for range 3 {
		var r Reply
		json.Unmarshal(request("chat", map[string]string{"text": text}).Data, &r)
		// The next chat waits for this turn (409 while it streams).
		deadline := time.Now().Add(30 * time.Second)
		for {
			var st struct {
				Detail struct{ ActiveTurn *chat.TurnInfo }
			}
			json.Unmarshal(request("status", nil).Data, &st)
			if st.Detail.ActiveTurn == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("turn did not end")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var all []chat.Message
	pages := 0
	after := ""
	for {
		msg := request("messages", map[string]any{"after": after})
		if len(msg.Data) > int(nc.MaxPayload()) {
			t.Fatalf("a reply of %d bytes, over the max payload %d", len(msg.Data), nc.MaxPayload())
		}
		var page struct {
			Messages []chat.Message
			Next     string
		}
		if err := json.Unmarshal(msg.Data, &page); err != nil {
			t.Fatal(err)
		}
		pages++
		all = append(all, page.Messages...)
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	t.Logf("%d messages in %d pages", len(all), pages)
	if len(all) != 6 || pages < 2 {
		t.Fatalf("%d messages in %d pages, want 6 in at least 2", len(all), pages)
	}
	seen := map[string]bool{}
	for i, m := range all {
		if seen[m.ID] {
			t.Errorf("message %s read twice", m.ID)
		}
		seen[m.ID] = true
		if want := []string{"user", "assistant"}[i%2]; m.Role != want {
			t.Errorf("message %d is %s, want %s", i, m.Role, want)
		}
	}
}
