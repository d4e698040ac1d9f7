package chat_test

import (
	"context"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

// TestTurnEndCrash: a turn's last events and its fiber's fiber.completed
// are one chain (from record format 11 one record: turn.completed carries
// the fiber's end). Killed right after it is durable, before the fiber's
// function returns: the turn has one outcome (completed, with its answer),
// its fiber is over with one fiber.completed, and a new incarnation has
// nothing to recover and nothing to write.
func TestTurnEndCrash(t *testing.T) {
	e := newEnv(t)
	local := llm.NewLocal(llm.LocalConfig{Rate: -1})
	h := e.host(t, "a1", local, nil)
	reached := make(chan struct{}, 1)
	chat.StopAt(h.a, func(ctx context.Context, point string) error {
		if point != "completed" {
			return nil
		}
		reached <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	wait(t, reached)
	h.r.Close()
	last, err := e.lg.LastSeq(t.Context(), eventlog.Filter{Agent: "a1"})
	if err != nil {
		t.Fatal(err)
	}

	recoverHost(t, e, "a1", local, nil)
	if after, err := e.lg.LastSeq(t.Context(), eventlog.Filter{Agent: "a1"}); err != nil || after != last {
		t.Fatalf("the new incarnation wrote: last event %d, was %d (%v)", after, last, err)
	}
	if msgs := settled(t, e, "a1"); len(msgs) != 2 || msgs[1].Text() == "" {
		t.Fatalf("messages = %+v, want the question and its answer", msgs)
	}
	if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnCompleted {
		t.Fatalf("turn = %s %q", tr.Status, tr.Error)
	}
	if rows := runs(t, e, "a1"); len(rows) != 0 {
		t.Fatalf("fibers left: %+v", rows)
	}
	evs, err := e.lg.Read(t.Context(), eventlog.Filter{Agent: "a1"}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, ev := range evs {
		n[ev.Type]++
		if ev.Completes != "" {
			n[fiber.EventCompleted]++ // carried (record format 11)
		}
	}
	if n[chat.EventTurnCompleted] != 1 || n[fiber.EventCompleted] != 1 || n[chat.EventTurnFailed] != 0 {
		t.Fatalf("events by type = %v, want one turn.completed and one fiber.completed", n)
	}
}
