package chat_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
)

// A turn whose fiber is abandoned is ended with a stored error, not left
// streaming: clients see the error, the partial is kept, and the agent takes
// the next turn.
func TestAbandonTurn(t *testing.T) {
	e := newEnv(t)
	turn := crash(t, e, "a1", "tell me a story", 5)
	_, partial := streamOf(t, e.lg, "a1", turn.StreamID)
	h := e.host(t, "a1", &fake{scripts: []script{passLocal()}}, nil)
	// Not a chat turn: ignored.
	if err := h.a.AbandonTurn(t.Context(), "other", errors.New("x")); err != nil {
		t.Fatal(err)
	}
	if err := h.a.AbandonTurn(t.Context(), chat.TurnFiberPrefix+turn.RequestID, errors.New("hook kept failing")); err != nil {
		t.Fatal(err)
	}
	cs, text := streamOf(t, e.lg, "a1", turn.StreamID)
	if last := cs[len(cs)-1]; last.Type != chunk.Error || !strings.Contains(last.ErrorText, "abandoned") || text != partial {
		t.Fatalf("stream ends with %+v, text %q (partial %q)", last, text, partial)
	}
	if info := streamInfo(t, e, "a1", turn.StreamID); info.Status != chunk.StatusError {
		t.Fatalf("stream = %+v", info)
	}
	if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnFailed {
		t.Fatalf("turn = %+v", tr)
	}
	msgs := settled(t, e, "a1")
	if len(msgs) != 2 || msgs[1].Text() != partial {
		t.Fatalf("messages = %+v", msgs)
	}
	// Twice is harmless.
	if err := h.a.AbandonTurn(t.Context(), chat.TurnFiberPrefix+turn.RequestID, errors.New("again")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "next"}); err != nil {
		t.Fatalf("send after an abandoned turn: %v", err)
	}
}
