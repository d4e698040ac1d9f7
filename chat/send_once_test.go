package chat_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/verify"
)

// turnsOf returns how many turns answer each user message of agent, from
// the log.
func turnsOf(t *testing.T, lg *eventlog.Log, agent string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, tr := range everyUserMessageAnswered(t, lg, agent) {
		out[tr.message]++
	}
	return out
}

func checkClean(t *testing.T, lg *eventlog.Log) {
	t.Helper()
	if rep, err := verify.Check(t.Context(), lg, verify.Options{}); err != nil || !rep.OK() {
		t.Fatalf("verify: %v\n%s", err, rep)
	}
}

// TestSendOnce: a command runs once, whichever way its copies come. A Send
// that carries the identity of one stored before (the client's message
// id, or the request id minted where the command entered) starts nothing
// and returns the original's reply: while the original turn runs, after it
// ended, on another process (a command re-routed to a new owner), after
// the process that stored it died before answering, and past the
// duplicate window. A copy that gets past the views (another process
// checked before the first copy was stored) is refused by the store
// (turn.started's message id) and also answered with the original.
func TestSendOnce(t *testing.T) {
	t.Run("retried while running and after", func(t *testing.T) {
		e := newEnv(t)
		reached, resume := make(chan struct{}, 1), make(chan struct{})
		h := e.host(t, "a1", &fake{scripts: []script{pauseAfter(2, reached, resume), passLocal()}}, nil)
		req := chat.SendRequest{Text: "hello there", RequestID: "edge-1"}
		first, err := h.a.Send(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		if first.RequestID != "edge-1" {
			t.Fatalf("request id %q, want the caller's", first.RequestID)
		}
		wait(t, reached)
		before, _ := e.lg.LastSeq(t.Context(), eventlog.Filter{Agent: "a1"})
		again, err := h.a.Send(t.Context(), req)
		if err != nil || !sameTurn(again, first) {
			t.Fatalf("retry while the turn runs: %+v, %v; want %+v", again, err, first)
		}
		if after, _ := e.lg.LastSeq(t.Context(), eventlog.Filter{Agent: "a1"}); after != before {
			t.Fatalf("the retry appended %d events", after-before)
		}
		close(resume)
		h.r.Wait()
		if again, err := h.a.Send(t.Context(), req); err != nil || !sameTurn(again, first) {
			t.Fatalf("retry after the turn: %+v, %v; want %+v", again, err, first)
		}
		// The client's message id is an identity too.
		m := &chat.Message{ID: "client-7", Parts: []chat.Part{{Type: chat.PartText, Text: "and then?"}}}
		second, err := h.a.Send(t.Context(), chat.SendRequest{Message: m})
		if err != nil {
			t.Fatal(err)
		}
		h.r.Wait()
		if again, err := h.a.Send(t.Context(), chat.SendRequest{Message: m, RequestID: "edge-2"}); err != nil || !sameTurn(again, second) {
			t.Fatalf("resent message: %+v, %v; want %+v", again, err, second)
		}
		// A request id is not reused for another message.
		other := &chat.Message{ID: "client-9", Parts: []chat.Part{{Type: chat.PartText, Text: "other"}}}
		if _, err := h.a.Send(t.Context(), chat.SendRequest{Message: other, RequestID: "edge-1"}); !errors.Is(err, chat.ErrDuplicateMessage) {
			t.Fatalf("request id of another message: %v, want ErrDuplicateMessage", err)
		}
		if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "x", RequestID: "bad id"}); !errors.Is(err, chat.ErrInvalidMessage) {
			t.Fatalf("bad request id: %v", err)
		}
		if got := turnsOf(t, e.lg, "a1"); len(got) != 2 || got["edge-1"] != 1 || got["client-7"] != 1 {
			t.Fatalf("turns per message = %v, want one each", got)
		}
		checkClean(t, e.lg)
	})

	t.Run("re-routed after the first node died", func(t *testing.T) {
		e1 := newEnv(t)
		h1 := e1.host(t, "a1", &fake{scripts: []script{passLocal()}}, nil)
		stored := make(chan struct{})
		chat.StopAt(h1.a, func(ctx context.Context, point string) error {
			if point == "send-stored" {
				close(stored)
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); h1.a.Send(ctx, chat.SendRequest{Text: "hello there", RequestID: "edge-3"}) }()
		wait(t, stored) // stored, never answered: the node dies
		h1.r.Close()
		cancel()
		<-done

		e2 := newEnvOn(t, e1.srv, eventlog.Config{})
		h2 := e2.host(t, "a1", &fake{scripts: []script{passLocal()}}, nil)
		again, err := h2.a.Send(t.Context(), chat.SendRequest{Text: "hello there", RequestID: "edge-3"})
		if err != nil || again.RequestID != "edge-3" {
			t.Fatalf("the command re-routed to the new owner: %+v, %v; want the stored turn", again, err)
		}
		if err := h2.r.Recover(t.Context()); err != nil {
			t.Fatal(err)
		}
		h2.r.Wait()
		if got := turnsOf(t, e2.lg, "a1"); len(got) != 1 || got["edge-3"] != 1 {
			t.Fatalf("turns per message = %v", got)
		}
		if tr := lastTurn(t, e2, "a1"); tr.RequestID != "edge-3" || tr.Status != chat.TurnCompleted {
			t.Fatalf("turn = %+v", tr)
		}
		checkClean(t, e2.lg)
	})

	t.Run("copy past the views is refused by the store", func(t *testing.T) {
		e1 := newEnv(t)
		e2 := newEnvOn(t, e1.srv, eventlog.Config{})
		h1 := e1.host(t, "a1", &fake{scripts: []script{passLocal()}}, nil)
		h2 := e2.host(t, "a1", &fake{scripts: []script{passLocal()}}, nil)
		checked, goOn := make(chan struct{}), make(chan struct{})
		chat.StopAt(h2.a, func(ctx context.Context, point string) error {
			if point == "send-checked" {
				close(checked)
				<-goOn
			}
			return nil
		})
		req := chat.SendRequest{Text: "hello there", RequestID: "edge-4"}
		copied := make(chan error, 1)
		var copyTurn chat.Turn
		go func() {
			var err error
			copyTurn, err = h2.a.Send(t.Context(), req)
			copied <- err
		}()
		wait(t, checked) // the copy found nothing stored
		first, err := h1.a.Send(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		close(goOn)
		if err := <-copied; err != nil || !sameTurn(copyTurn, first) {
			t.Fatalf("the copy: %+v, %v; want the original %+v", copyTurn, err, first)
		}
		h1.r.Wait()
		h2.r.Wait()
		if got := turnsOf(t, e1.lg, "a1"); len(got) != 1 || got["edge-4"] != 1 {
			t.Fatalf("turns per message = %v", got)
		}
		if tr := lastTurn(t, e1, "a1"); tr.Status != chat.TurnCompleted || tr.Orphaned {
			t.Fatalf("turn = %+v: the copy's fiber must not orphan it", tr)
		}
		checkClean(t, e1.lg)
	})

	// The copy goes on while the original's fiber still runs, and its
	// runs table has not shown that fiber yet (it lags behind another
	// process's writes): the copy's fiber.started is conditional on the log
	// it checked, so it lands nothing beside the original (a second fiber
	// of the turn, which verify reports as turn-two-fibers), and the copy
	// is answered with the original.
	t.Run("copy past the views and the runs table starts no fiber", func(t *testing.T) {
		e1 := newEnv(t)
		e2 := newEnvOn(t, e1.srv, eventlog.Config{})
		held := &holdLog{Log: e2.lg, typ: fiber.EventStarted, held: make(chan struct{}), release: make(chan struct{})}
		e2.writes = held
		reached, resume := make(chan struct{}, 1), make(chan struct{})
		h1 := e1.host(t, "a1", &fake{scripts: []script{pauseAfter(2, reached, resume)}}, nil)
		h2 := e2.host(t, "a1", &fake{scripts: []script{passLocal()}}, nil)
		req := chat.SendRequest{Text: "hello there", RequestID: "edge-6"}
		copied := make(chan error, 1)
		var copyTurn chat.Turn
		go func() {
			var err error
			copyTurn, err = h2.a.Send(t.Context(), req)
			copied <- err
		}()
		wait(t, held.held) // the copy checked the views and the runs table, and appends its fiber.started
		first, err := h1.a.Send(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		wait(t, reached) // the original's fiber runs
		close(held.release)
		if err := <-copied; err != nil || !sameTurn(copyTurn, first) {
			t.Fatalf("the copy: %+v, %v; want the original %+v", copyTurn, err, first)
		}
		close(resume)
		h1.r.Wait()
		h2.r.Wait()
		if got := turnsOf(t, e1.lg, "a1"); len(got) != 1 || got["edge-6"] != 1 {
			t.Fatalf("turns per message = %v", got)
		}
		if tr := lastTurn(t, e1, "a1"); tr.Status != chat.TurnCompleted || tr.Orphaned {
			t.Fatalf("turn = %+v", tr)
		}
		checkClean(t, e1.lg)
	})

	t.Run("past the duplicate window", func(t *testing.T) {
		e := newEnvWith(t, eventlog.Config{Duplicates: 100 * time.Millisecond})
		h := e.host(t, "a1", &fake{scripts: []script{passLocal()}}, nil)
		req := chat.SendRequest{Text: "hello there", RequestID: "edge-5"}
		first, err := h.a.Send(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		h.r.Wait()
		// Not a synchronisation: the duplicate window passes, and
		// JetStream forgets the id.
		time.Sleep(300 * time.Millisecond)
		if again, err := h.a.Send(t.Context(), req); err != nil || !sameTurn(again, first) {
			t.Fatalf("past the window: %+v, %v; want %+v", again, err, first)
		}
		if got := turnsOf(t, e.lg, "a1"); len(got) != 1 {
			t.Fatalf("turns per message = %v", got)
		}
	})
}

// sameTurn reports whether two Sends answered the same turn. The cursor
// is left out: a copy of a command is answered with 0, which follows the
// turn's stream from its first chunk.
func sameTurn(a, b chat.Turn) bool {
	a.Cursor, b.Cursor = 0, 0
	return a == b
}

// holdLog holds the first append of an event of type typ until release is
// closed (closing held when it is reached), then sends it as it was: what
// a process does between checking and writing, slowed down.
type holdLog struct {
	*eventlog.Log
	typ     string
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

func (l *holdLog) Append(ctx context.Context, e eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	l.hold(e)
	return l.Log.Append(ctx, e, opts...)
}

// AppendAll holds a chain with an event of the type as Append holds the
// event.
func (l *holdLog) AppendAll(ctx context.Context, evs []eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	for _, e := range evs {
		l.hold(e)
	}
	return l.Log.AppendAll(ctx, evs, opts...)
}

func (l *holdLog) hold(e eventlog.Event) {
	if e.Type == l.typ {
		first := false
		l.once.Do(func() { first = true })
		if first {
			close(l.held)
			<-l.release
		}
	}
}
