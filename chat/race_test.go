package chat_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/verify"
)

// TestSendRacingRecovery: a Send that holds the agent's turn slot, not yet
// knowing it will be refused, while a crashed turn is recovered: the Send
// is refused with ErrTurnActive (the recovering turn is active) and the
// recovered turn is untouched: it waits for the slot, continues and
// completes, its stream ending with one finish chunk. (Before, the
// recovery failed at once on the slot, "a turn is already active: X runs
// while Y is recovered", and ended the turn with turn.failed.)
func TestSendRacingRecovery(t *testing.T) {
	e := newEnv(t)
	const prompt = "tell me a story"
	turn := crash(t, e, "a1", prompt, 5)

	holding, claiming := make(chan struct{}), make(chan struct{})
	var holdOnce, claimOnce sync.Once
	h := e.host(t, "a1", &fake{scripts: []script{passLocal()}}, nil)
	chat.StopAt(h.a, func(ctx context.Context, point string) error {
		switch point {
		case "send-begin": // the Send holds the slot until the recovery claims it
			holdOnce.Do(func() { close(holding) })
			select {
			case <-claiming:
			case <-ctx.Done():
				return ctx.Err()
			}
		case "recover-claim":
			claimOnce.Do(func() { close(claiming) })
		}
		return nil
	})
	sent := make(chan error, 1)
	go func() {
		_, err := h.a.Send(t.Context(), chat.SendRequest{Text: "are you there?"})
		sent <- err
	}()
	wait(t, holding)
	if err := h.r.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; !errors.Is(err, chat.ErrTurnActive) {
		t.Fatalf("Send while a turn is recovered: %v, want ErrTurnActive", err)
	}
	h.r.Wait()

	tr := lastTurn(t, e, "a1")
	if tr.RequestID != turn.RequestID || tr.Status != chat.TurnCompleted {
		t.Fatalf("recovered turn = %+v, want %s completed", tr, turn.RequestID)
	}
	cs, text := streamOf(t, e.lg, "a1", turn.StreamID)
	if text != answer(prompt) || count(cs, chunk.Finish) != 1 || count(cs, chunk.Error) != 0 || cs[len(cs)-1].Type != chunk.Finish {
		t.Fatalf("stream %q, last chunk %s", text, cs[len(cs)-1].Type)
	}
	if msgs := settled(t, e, "a1"); len(msgs) != 2 {
		t.Fatalf("messages = %+v, want the question and its answer only", msgs)
	}
	everyUserMessageAnswered(t, e.lg, "a1")
	if rep, err := verify.Check(t.Context(), e.lg, verify.Options{}); err != nil || !rep.OK() {
		t.Fatalf("verify: %v\n%s", err, rep)
	}
}
