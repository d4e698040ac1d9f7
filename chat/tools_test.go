package chat_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

// orphanWithBadTools writes, as a process that died mid-turn would have
// left it, a turn r1 whose stored tools do not decode and whose stream s1
// already holds text: its fiber is orphaned.
func orphanWithBadTools(t *testing.T, e *env, agent string) {
	t.Helper()
	ctx := t.Context()
	appendJSON := func(typ string, v any) {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.lg.Append(ctx, eventlog.Event{Agent: agent, Type: typ, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	appendJSON(chat.EventMessageAppended, chat.Message{ID: "u1", Role: chat.RoleUser, RequestID: "r1",
		Parts: []chat.Part{{Type: "text", Text: "hi"}}})
	appendJSON(chat.EventTurnStarted, map[string]any{"requestId": "r1", "streamId": "s1", "messageId": "u1",
		"assistantMessageId": "m1", "tools": "not a list of tools"})
	appendJSON(fiber.EventStarted, map[string]any{"id": "f1", "name": "__chat_turn:r1"})
	w := chunk.NewWriter(e.batcher, agent, "s1", 0, e.lg.MaxPayload())
	for _, c := range []chunk.Chunk{
		{Type: chunk.Start, MessageID: "m1", RequestID: "r1"},
		{Type: chunk.TextStart, ID: "t1"},
		{Type: chunk.TextDelta, ID: "t1", Delta: "Hello"},
	} {
		if err := w.Write(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestStoredToolsThatDoNotDecode: one rule for tools that do not decode.
// Recovery fails the turn before asking the recovery hook (which used to
// get no tools and let the turn go on), and ContinueLastTurn refuses
// (it used to continue without them), with an error matching ErrCorrupt.
func TestStoredToolsThatDoNotDecode(t *testing.T) {
	e := newEnv(t)
	orphanWithBadTools(t, e, "a1")
	hl := &hookLog{dec: chat.RecoveryDecision{Persist: true, Continue: true}}
	p := &fake{scripts: []script{passLocal()}}
	h := recoverHost(t, e, "a1", p, func(c *chat.Config) { c.OnChatRecovery = hl.hook })
	settled(t, e, "a1")
	if len(hl.recs) != 0 {
		t.Errorf("recovery hook called %d times for a turn whose tools do not decode", len(hl.recs))
	}
	if p.Calls() != 0 {
		t.Errorf("provider called %d times without the turn's tools", p.Calls())
	}
	tr, err := e.store.Turn("a1", "r1")
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != chat.TurnFailed || !strings.Contains(tr.Error, "tools of turn r1") {
		t.Fatalf("turn = %s %q, want failed naming its tools", tr.Status, tr.Error)
	}
	cs, _ := streamOf(t, e.lg, "a1", "s1")
	if last := cs[len(cs)-1]; last.Type != chunk.Error {
		t.Fatalf("stream ends with %s, want an error chunk", last.Type)
	}
	if _, err := h.a.ContinueLastTurn(t.Context(), nil); !errors.Is(err, eventlog.ErrCorrupt) {
		t.Fatalf("ContinueLastTurn = %v, want ErrCorrupt", err)
	}
}
