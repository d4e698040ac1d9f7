package chat_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

// writeCalls is a log that records the event types of each awaited
// write: one entry an Append, an AppendAll or an AppendBatch.
type writeCalls struct {
	*eventlog.Log
	mu    sync.Mutex
	calls []string
}

func (l *writeCalls) note(evs ...eventlog.Event) {
	types := make([]string, len(evs))
	for i, e := range evs {
		types[i] = e.Type
	}
	l.mu.Lock()
	l.calls = append(l.calls, strings.Join(types, " "))
	l.mu.Unlock()
}

func (l *writeCalls) Append(ctx context.Context, e eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	l.note(e)
	return l.Log.Append(ctx, e, opts...)
}

func (l *writeCalls) AppendAll(ctx context.Context, evs []eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	l.note(evs...)
	return l.Log.AppendAll(ctx, evs, opts...)
}

func (l *writeCalls) AppendBatch(ctx context.Context, evs []eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	l.note(evs...)
	return l.Log.AppendBatch(ctx, evs, opts...)
}

// TestSendStartsInOneChain: a Send's fiber.started and turn.started are
// one write (one chain, one round trip); after a stale "turn" interrupt
// they are three, fiber.started, interrupt.cleared and turn.started, and
// the turn is not aborted by the stale flag. Both turns complete.
func TestSendStartsInOneChain(t *testing.T) {
	for _, stale := range []bool{false, true} {
		name := "plain"
		if stale {
			name = "stale-interrupt"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			calls := &writeCalls{Log: e.lg}
			e.writes = calls
			h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), nil)
			if stale {
				if err := h.a.SetInterrupt(t.Context(), chat.InterruptTurn); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "tell me a story"}); err != nil {
				t.Fatal(err)
			}
			h.r.Wait()
			calls.mu.Lock()
			got := slices.Clone(calls.calls)
			calls.mu.Unlock()
			want := []string{fiber.EventStarted + " " + chat.EventTurnStarted}
			if stale {
				want = []string{chat.EventInterruptSet, fiber.EventStarted, chat.EventInterruptCleared, chat.EventTurnStarted}
			}
			if len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
				t.Fatalf("writes %q, want them to begin with %q", got, want)
			}
			oneTurnCompleted(t, e.lg, "a1")
		})
	}
}

// startCutLog stores a turn's start chain up to its fiber.started and
// dies there: turn.started is not stored, and every later write fails
// with errDead, as in a process killed between the chain's two records.
type startCutLog struct {
	*eventlog.Log
	reached chan struct{}
	dead    atomic.Bool
}

func (l *startCutLog) Append(ctx context.Context, e eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	if l.dead.Load() {
		return 0, errDead
	}
	return l.Log.Append(ctx, e, opts...)
}

func (l *startCutLog) AppendBatch(ctx context.Context, evs []eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	if l.dead.Load() {
		return 0, errDead
	}
	return l.Log.AppendBatch(ctx, evs, opts...)
}

func (l *startCutLog) AppendAll(ctx context.Context, evs []eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	if l.dead.Load() {
		return 0, errDead
	}
	if len(evs) < 2 || evs[0].Type != fiber.EventStarted || evs[1].Type != chat.EventTurnStarted {
		return l.Log.AppendAll(ctx, evs, opts...)
	}
	seq, err := l.Log.Append(ctx, evs[0], opts...)
	if err != nil {
		return 0, err
	}
	l.dead.Store(true)
	close(l.reached)
	return seq, errDead
}

// TestStartChainCut: killed between a Send's fiber.started and its
// turn.started (the start chain cut after its first record), the Send is
// not acknowledged, and a new incarnation ends the turn fiber without a
// word: no user message, no turn, no fiber left, verify clean; the next
// Send runs.
func TestStartChainCut(t *testing.T) {
	e := newEnv(t)
	local := llm.NewLocal(llm.LocalConfig{Rate: -1})
	cut := &startCutLog{Log: e.lg, reached: make(chan struct{})}
	e.writes = cut
	h := e.host(t, "a1", local, nil)
	if turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: "tell me a story"}); err == nil {
		t.Fatalf("Send acknowledged turn %+v, whose turn.started was not stored", turn)
	}
	wait(t, cut.reached)
	h.r.Close()
	e.writes = nil
	if s := readShape(t, e, "a1"); s.types[fiber.EventStarted] != 1 || s.types[chat.EventTurnStarted] != 0 {
		t.Fatalf("at the cut: events %v, want fiber.started stored and no turn.started", s.types)
	}

	h2 := recoverHost(t, e, "a1", local, nil)
	if turns := everyUserMessageAnswered(t, e.lg, "a1"); len(turns) != 0 {
		t.Fatalf("turns after recovery %+v, want none", turns)
	}
	if rows := runs(t, e, "a1"); len(rows) != 0 {
		t.Fatalf("fibers left: %+v", rows)
	}
	checkClean(t, e.lg)
	if _, err := h2.a.Send(t.Context(), chat.SendRequest{Text: "tell me a story"}); err != nil {
		t.Fatal(err)
	}
	h2.r.Wait()
	oneTurnCompleted(t, e.lg, "a1")
}

// oneTurnCompleted fails t unless agent's log holds one turn, completed.
func oneTurnCompleted(t *testing.T, lg *eventlog.Log, agent string) {
	t.Helper()
	turns := everyUserMessageAnswered(t, lg, agent)
	if len(turns) != 1 {
		t.Fatalf("turns %+v, want one", turns)
	}
	for _, tr := range turns {
		if tr.outcome != chat.EventTurnCompleted {
			t.Fatalf("turn ended %s, want completed", tr.outcome)
		}
	}
}
