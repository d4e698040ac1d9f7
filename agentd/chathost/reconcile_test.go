package chathost

import (
	"errors"
	"net/http"
	"testing"

	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat"
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
