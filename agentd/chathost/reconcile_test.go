package chathost

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/internal/apierror/apierrortest"
	"github.com/forever-agents/forever/replay"
)

type fakeConversation []chat.Message

func (c fakeConversation) LastID() string {
	if len(c) == 0 {
		return ""
	}
	return c[len(c)-1].ID
}

func (c fakeConversation) Message(id string) (chat.Message, error) {
	for _, m := range c {
		if m.ID == id {
			return m, nil
		}
	}
	return chat.Message{}, chat.ErrNotFound
}

func (c fakeConversation) All() ([]chat.Message, error) { return c, nil }

func textMessage(id, role, text string) chat.Message {
	return chat.Message{ID: id, Role: role, Parts: []chat.Part{{Type: chat.PartText, Text: text}}}
}

// TestReconcile: how an AI SDK request applies to the stored conversation,
// by message id (see reconcile).
func TestReconcile(t *testing.T) {
	stored := fakeConversation{
		textMessage("u1", "user", "hello"), textMessage("a1", "assistant", "hi"),
		textMessage("u2", "user", "again"), textMessage("a2", "assistant", "yes"),
	}
	hist := func(n int) *replay.History {
		h := digestOf(stored[:n])
		return &h
	}
	otherText := func() *replay.History {
		h := digestOf([]chat.Message{textMessage("u1", "user", "HELLO"), stored[1]})
		return &h
	}
	for _, tc := range []struct {
		name      string
		msg       chat.Message
		trigger   string
		messageID string
		history   *replay.History
		want      plan
		code      int
	}{
		{name: "new message, whole history", msg: textMessage("u3", "user", "more"), trigger: triggerSubmit, history: hist(4)},
		{name: "new message, only the last sent", msg: textMessage("u3", "user", "more"), trigger: triggerSubmit},
		{name: "new message without id", msg: textMessage("", "user", "more")},
		{name: "new message after a history of the client's own", msg: textMessage("u3", "user", "more"), history: &replay.History{Count: 5, LastID: "x9"}},
		{name: "messages dropped by the client", msg: textMessage("u3", "user", "more"), trigger: triggerSubmit, history: hist(2), want: plan{Rewrite: true, AfterID: "a1"}},
		{name: "dropped after a history that differs", msg: textMessage("u3", "user", "more"), trigger: triggerSubmit, history: otherText(), code: http.StatusConflict},
		{name: "retry", msg: textMessage("u2", "user", "again"), trigger: triggerSubmit, history: hist(2)},
		{name: "regenerate", msg: textMessage("u2", "user", "again"), trigger: triggerRegenerate, history: hist(2), want: plan{Rewrite: true, AfterID: "a1"}},
		{name: "regenerate, only the last sent", msg: textMessage("u2", "user", "again"), trigger: triggerRegenerate, want: plan{Rewrite: true, AfterID: "a1"}},
		{name: "regenerate of the first message", msg: textMessage("u1", "user", "hello"), trigger: triggerRegenerate, want: plan{Rewrite: true}},
		{name: "regenerate of a message never stored", msg: textMessage("u9", "user", "x"), trigger: triggerRegenerate},
		{name: "edit of the last user message", msg: textMessage("u2", "user", "changed"), trigger: triggerSubmit, messageID: "u2", history: hist(2), want: plan{Rewrite: true, AfterID: "a1"}},
		{name: "edit of an earlier message", msg: textMessage("u1", "user", "changed"), trigger: triggerSubmit, messageID: "u1", want: plan{Rewrite: true}},
		{name: "edit without messageId", msg: textMessage("u1", "user", "changed"), want: plan{Rewrite: true}},
		{name: "edit of the same text", msg: textMessage("u2", "user", "again"), trigger: triggerSubmit, messageID: "u2", want: plan{Rewrite: true, AfterID: "a1"}},
		{name: "edit after a history that differs", msg: textMessage("u2", "user", "changed"), messageID: "u2", history: &replay.History{Count: 2, LastID: "a1", Digest: "x"}, code: http.StatusConflict},
		{name: "an assistant message's id", msg: textMessage("a1", "user", "x"), trigger: triggerSubmit},
		{name: "unknown trigger", msg: textMessage("u3", "user", "x"), trigger: "submit", code: http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := Request{Message: &tc.msg, Trigger: tc.trigger, MessageID: tc.messageID, History: tc.history}
			got, err := reconcile(req, stored)
			if tc.code != 0 {
				if err == nil || host.StatusCode(err) != tc.code {
					t.Fatalf("reconcile = %+v, %v; want a %d", got, err, tc.code)
				}
				if !errors.Is(err, host.ErrConflict) && !errors.Is(err, host.ErrBadRequest) {
					t.Fatalf("reconcile: %v", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("reconcile = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestHTTPHistoryConflict: over HTTP, a request whose earlier messages do
// not match the stored conversation before the point it continues from is
// a 409 that says what to do, and stores nothing; the same request with
// the stored history drops the messages after that point and continues.
func TestHTTPHistoryConflict(t *testing.T) {
	cfg := agentdtest.Config(t)
	d, _ := newChatDaemon(t, cfg, -1, AttachGateway)
	agentdtest.Start(t, d)
	base := "http://" + d.HTTPAddr()
	agentdtest.WaitStatus(t, base+"/readyz", 200)
	conversation := func() []chat.Message {
		t.Helper()
		code, body := agentdtest.Get(t, base+"/v1/chat/c1/messages")
		if code != 200 {
			t.Fatalf("messages: %d %s", code, body)
		}
		var page struct{ Messages []chat.Message }
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatal(err)
		}
		return page.Messages
	}
	post := func(msgs []chat.Message) (int, string) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"id": "c1", "trigger": "submit-message", "messages": msgs})
		resp := agentdtest.Post(t, t.Context(), base+"/v1/chat", string(body))
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, m := range []chat.Message{textMessage("u1", "user", "one"), textMessage("u2", "user", "two")} {
		if code, body := post(append(conversation(), m)); code != 200 {
			t.Fatalf("send %s: %d %s", m.ID, code, body)
		}
	}
	stored := conversation()
	if len(stored) != 4 {
		t.Fatalf("%d messages, want 4", len(stored))
	}
	// The client dropped u2 and its answer, and has u1 with other text.
	changed := append([]chat.Message{textMessage("u1", "user", "ONE")}, stored[1])
	code, body := post(append(changed, textMessage("u3", "user", "three")))
	if code != http.StatusConflict || !strings.Contains(body, "GET /v1/chat/{id}/messages") {
		t.Fatalf("a history that differs: %d %s", code, body)
	}
	apierrortest.CheckMessage(t, "conflict", body)
	if got := conversation(); len(got) != 4 {
		t.Fatalf("after a 409: %d messages, want 4", len(got))
	}
	// The stored history up to a1: u2 and its answer are dropped.
	if code, body := post(append(stored[:2:2], textMessage("u3", "user", "three"))); code != 200 {
		t.Fatalf("after dropping: %d %s", code, body)
	}
	got := conversation()
	if len(got) != 4 || got[1].ID != stored[1].ID || got[2].ID != "u3" || got[3].Role != chat.RoleAssistant {
		t.Fatalf("after dropping u2: %+v", got)
	}
}
