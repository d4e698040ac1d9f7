package chathost

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/internal/waitfor"
)

// TestMessagesPagesByBytes: the messages verb over NATS pages by bytes as
// well as by count. Three chats of 400 KiB (each under the command limit)
// make a conversation of more than the server's 1 MiB max payload: every
// reply fits in it, and next continues the page until every message was
// read once. (A page over the max payload used to get no answer at all.)
func TestMessagesPagesByBytes(t *testing.T) {
	cfg := agentdtest.Config(t)
	d, _ := newChatDaemon(t, cfg, -1, AttachGateway)
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
		waitfor.True(t, "the turn to end", func() bool {
			var st struct {
				Detail struct{ ActiveTurn *chat.TurnInfo }
			}
			json.Unmarshal(request("status", nil).Data, &st)
			return st.Detail.ActiveTurn == nil
		})
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
	// GET /v1/chat/{id}/messages pages by bytes the same way once a query
	// asks for pages: every page fits one reply, and next reads the rest.
	var overHTTP []chat.Message
	httpPages := httpPageAll(t, "http://"+d.HTTPAddr()+"/v1/chat/big/messages?limit=1000", &overHTTP)
	if len(overHTTP) != len(all) || httpPages < 2 {
		t.Fatalf("over HTTP %d messages in %d pages, want %d in at least 2", len(overHTTP), httpPages, len(all))
	}
	for i := range all {
		if overHTTP[i].ID != all[i].ID {
			t.Fatalf("over HTTP message %d is %s, over NATS %s", i, overHTTP[i].ID, all[i].ID)
		}
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

// httpPageAll reads every page of GET url (a messages query) into all,
// following next, and returns how many pages it read.
func httpPageAll(t *testing.T, url string, all *[]chat.Message) int {
	t.Helper()
	pages, after := 0, ""
	for {
		u := url
		if after != "" {
			u += "&after=" + after
		}
		code, body := agentdtest.Get(t, u)
		if code != 200 {
			t.Fatalf("GET %s: %d %s", u, code, body)
		}
		var page struct {
			Messages []chat.Message
			Next     string
		}
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatal(err)
		}
		pages++
		*all = append(*all, page.Messages...)
		if page.Next == "" {
			return pages
		}
		after = page.Next
	}
}

// TestHTTPMessagesPagesByCount: GET /v1/chat/{id}/messages?limit=10 pages
// through a conversation of 100 messages in 10 pages, each message once and
// in order; without a query it is the whole conversation with "next":"";
// a bad limit is 400 and an unknown after is 404.
func TestHTTPMessagesPagesByCount(t *testing.T) {
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
	for i := range 50 {
		// The next chat waits for this turn (409 while it streams).
		waitfor.True(t, "the agent to take the next chat", func() bool {
			data, _ := json.Marshal(map[string]string{"text": "hello " + strings.Repeat("x", i)})
			msg, err := nc.Request("forever.cmd.pages.chat", data, 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			code := msg.Header.Get("Nats-Service-Error-Code")
			if code != "" && code != "409" {
				t.Fatalf("chat %d: %s %s", i, code, msg.Data)
			}
			return code == ""
		})
	}
	var whole struct {
		Messages []chat.Message
		Next     *string
	}
	var all []chat.Message
	// The last turn may still be writing its answer: page once it is there.
	waitfor.True(t, "the whole conversation's 100 messages", func() bool {
		_, body := agentdtest.Get(t, base+"/v1/chat/pages/messages")
		if err := json.Unmarshal([]byte(body), &whole); err != nil {
			t.Fatal(err)
		}
		return len(whole.Messages) == 100
	})
	if len(whole.Messages) != 100 || whole.Next == nil || *whole.Next != "" {
		t.Fatalf("whole conversation: %d messages, next %v; want 100 and \"\"", len(whole.Messages), whole.Next)
	}
	if pages := httpPageAll(t, base+"/v1/chat/pages/messages?limit=10", &all); pages != 10 || len(all) != 100 {
		t.Fatalf("limit=10: %d messages in %d pages, want 100 in 10", len(all), pages)
	}
	for i := range all {
		if all[i].ID != whole.Messages[i].ID {
			t.Fatalf("paged message %d is %s, want %s", i, all[i].ID, whole.Messages[i].ID)
		}
	}
	for _, tt := range []struct {
		query string
		code  int
	}{
		{"?limit=0", 400},
		{"?limit=ten", 400},
		{"?limit=1001", 400},
		{"?after=nope", 404},
	} {
		if code, body := agentdtest.Get(t, base+"/v1/chat/pages/messages"+tt.query); code != tt.code || !strings.Contains(body, `"error"`) {
			t.Errorf("GET messages%s: %d %s, want %d with an error", tt.query, code, body, tt.code)
		}
	}
}
