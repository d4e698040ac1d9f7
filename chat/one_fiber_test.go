package chat_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/verify"
)

// TestOneFiberPerTurn: a turn has one fiber on any node. The turn's node
// stops mid-stream (a handoff) with a second fiber.started of the turn's
// name in the log beside the turn's own (one that landed after its command
// gave up). The new owner recovers both rows at once, and a chat of the
// turn's own identity comes to it while the recovery waits to claim the
// turn: the chat is answered with the turn, one fiber runs the turn, the
// other ends without touching it, and the stream ends once.
func TestOneFiberPerTurn(t *testing.T) {
	e1 := newEnv(t)
	reached := make(chan struct{}, 1)
	h1 := e1.host(t, "a1", &fake{scripts: []script{cutAfter(2, reached)}}, nil)
	req := chat.SendRequest{Text: "tell me a story", RequestID: "edge-9"}
	first, err := h1.a.Send(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, reached)
	late := eventlog.Event{Agent: "a1", Type: fiber.EventStarted,
		Data: []byte(fmt.Sprintf(`{"id":"late-fiber","name":%q,"createdAt":%q}`, chat.TurnFiberPrefix+"edge-9", time.Now().UTC().Format(time.RFC3339Nano)))}
	if _, err := e1.lg.Append(t.Context(), late); err != nil {
		t.Fatal(err)
	}
	h1.r.Close() // handed off: the fiber is left for recovery

	e2 := newEnvOn(t, e1.srv, eventlog.Config{})
	h2 := e2.host(t, "a1", &fake{scripts: []script{passLocal()}}, nil)
	claiming, goOn := make(chan struct{}), make(chan struct{})
	var once sync.Once
	chat.StopAt(h2.a, func(ctx context.Context, point string) error {
		if point == "recover-claim" {
			once.Do(func() { close(claiming) })
			select {
			case <-goOn:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	if err := h2.r.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	wait(t, claiming)
	again, err := h2.a.Send(t.Context(), req)
	if err != nil || !sameTurn(again, first) {
		t.Fatalf("chat of the turn's identity during its recovery: %+v, %v; want %+v", again, err, first)
	}
	close(goOn)
	h2.r.Wait()

	if got := turnsOf(t, e2.lg, "a1"); len(got) != 1 || got["edge-9"] != 1 {
		t.Fatalf("turns per message = %v, want one", got)
	}
	if tr := lastTurn(t, e2, "a1"); tr.RequestID != "edge-9" || tr.Status != chat.TurnCompleted {
		t.Fatalf("turn = %+v, want edge-9 completed", tr)
	}
	cs, _ := streamOf(t, e2.lg, "a1", first.StreamID)
	if n := count(cs, chunk.Finish) + count(cs, chunk.Error) + count(cs, chunk.Abort); n != 1 {
		t.Fatalf("%d terminal chunks in the turn's stream, want 1: %+v", n, cs)
	}
	if n := count(cs, chunk.Start); n != 1 {
		t.Fatalf("%d start chunks, want 1", n)
	}
	if rows := runs(t, e2, "a1"); len(rows) != 0 {
		t.Fatalf("fibers left in the runs table: %+v", rows)
	}
	// The log holds what the test put there, the late fiber.started beside
	// the turn's live fiber, and nothing else wrong.
	rep, err := verify.Check(t.Context(), e2.lg, verify.Options{Acked: []verify.Ack{{Agent: "a1", ID: "edge-9"}}})
	if err != nil || len(rep.Violations) != 1 || rep.Violations[0].Kind != verify.KindTurnTwoFibers || rep.Violations[0].Fiber != "late-fiber" {
		t.Fatalf("verify: %v\n%s\nwant only the injected fiber's %s", err, rep, verify.KindTurnTwoFibers)
	}
}

// TestCommandWaitsForItsRecovery: a command of a turn whose fiber is left
// for recovery (its fiber.started stored, its turn.started not, as when the
// node stopped between them) starts no second fiber beside it: it is
// refused as busy until the recovery ended that fiber, then runs once.
func TestCommandWaitsForItsRecovery(t *testing.T) {
	e := newEnv(t)
	left := eventlog.Event{Agent: "a1", Type: fiber.EventStarted,
		Data: []byte(fmt.Sprintf(`{"id":"left-fiber","name":%q,"createdAt":%q}`, chat.TurnFiberPrefix+"edge-7", time.Now().UTC().Format(time.RFC3339Nano)))}
	if _, err := e.lg.Append(t.Context(), left); err != nil {
		t.Fatal(err)
	}
	h := e.host(t, "a1", &fake{scripts: []script{passLocal()}}, nil)
	req := chat.SendRequest{Text: "hello there", RequestID: "edge-7"}
	if rows := runs(t, e, "a1"); len(rows) != 1 {
		t.Fatalf("runs table = %+v, want the fiber left for recovery", rows)
	}
	if _, err := h.a.Send(t.Context(), req); !errors.Is(err, chat.ErrTurnActive) {
		t.Fatalf("command while its fiber is left for recovery: %v, want ErrTurnActive", err)
	}
	if err := h.r.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	turn, err := h.a.Send(t.Context(), req)
	if err != nil || turn.RequestID != "edge-7" {
		t.Fatalf("command after the recovery: %+v, %v", turn, err)
	}
	h.r.Wait()
	if tr := lastTurn(t, e, "a1"); tr.RequestID != "edge-7" || tr.Status != chat.TurnCompleted {
		t.Fatalf("turn = %+v", tr)
	}
	if _, live := fibersNamed(t, e.lg, "a1", chat.TurnFiberPrefix+"edge-7"); live != 1 {
		t.Fatalf("%d fibers of the turn live at once, want 1", live)
	}
	checkClean(t, e.lg)
}
