package chat_test

import (
	"context"
	"errors"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
)

func TestTruncate(t *testing.T) {
	e := newEnv(t)
	h := e.host(t, "a1", &fake{scripts: []func(context.Context, llm.Request, func(llm.Delta, error) bool){passLocal(), passLocal(), passLocal()}}, nil)
	for _, prompt := range []string{"first", "second"} {
		if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: prompt}); err != nil {
			t.Fatal(err)
		}
		h.r.Wait()
	}
	msgs := settled(t, e, "a1")
	if len(msgs) != 4 {
		t.Fatalf("%d messages, want 4", len(msgs))
	}
	if err := h.a.Truncate(t.Context(), "nope"); !errors.Is(err, chat.ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	// Keep the first exchange; the next turn continues from it.
	if err := h.a.Truncate(t.Context(), msgs[1].ID); err != nil {
		t.Fatal(err)
	}
	got, _, err := h.a.Messages(chat.Page{})
	if err != nil || len(got) != 2 || got[1].ID != msgs[1].ID {
		t.Fatalf("after truncate: %d messages (%v)", len(got), err)
	}
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "third"}); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	if got := settled(t, e, "a1"); len(got) != 4 || got[2].Text() != "third" {
		t.Fatalf("after a new turn: %+v", got)
	}
	if err := h.a.Truncate(t.Context(), ""); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := h.a.Messages(chat.Page{}); len(got) != 0 {
		t.Fatalf("truncate all left %d", len(got))
	}
}

// TestRewrite: a message sent again with its id after a Rewrite (an AI SDK
// edit, within JetStream's duplicate window) is a new turn answering the
// new text, and replaces the messages after the point it rewrites from.
func TestRewrite(t *testing.T) {
	e := newEnv(t)
	h := e.host(t, "a1", &fake{scripts: []func(context.Context, llm.Request, func(llm.Delta, error) bool){passLocal(), passLocal(), passLocal()}}, nil)
	send := func(id, text string) chat.SendRequest {
		return chat.SendRequest{Message: &chat.Message{ID: id, Role: chat.RoleUser, Parts: []chat.Part{{Type: chat.PartText, Text: text}}}}
	}
	first, err := h.a.Send(t.Context(), send("u1", "one"))
	if err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	if _, err := h.a.Send(t.Context(), send("u2", "two")); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	if _, err := h.a.Rewrite(t.Context(), "nope", send("u1", "x")); !errors.Is(err, chat.ErrNotFound) {
		t.Fatalf("rewrite after an unknown id: %v", err)
	}
	turn, err := h.a.Rewrite(t.Context(), "", send("u1", "one, edited"))
	if err != nil {
		t.Fatal(err)
	}
	if turn.RequestID == first.RequestID || turn.MessageID == first.MessageID {
		t.Fatalf("the rewrite answered with the first turn: %+v", turn)
	}
	h.r.Wait()
	got := settled(t, e, "a1")
	if len(got) != 2 || got[0].ID != "u1" || got[0].Text() != "one, edited" || got[1].ID != turn.MessageID {
		t.Fatalf("after the rewrite: %+v", got)
	}
	last, err := h.a.Conversation(t.Context())
	if err != nil || last != turn.MessageID {
		t.Fatalf("Conversation = %q, %v; want %q", last, err, turn.MessageID)
	}
}
