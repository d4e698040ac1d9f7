package chat_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestToolUsageStashedChunksLost: the stash of a step's usage before its
// tools goes beside the flush of their input, not after it. Killed with
// that stash durable and the tool calls' chunks not stored (a crash
// between the two writes), the recovered turn makes the step's model call
// again, runs each tool once, and records the usage the same turn records
// uncut: the stashed usage of a call whose tool calls the stream does not
// hold is not counted.
func TestToolUsageStashedChunksLost(t *testing.T) {
	local := llm.NewLocal(llm.LocalConfig{Rate: -1})

	// The turn without a crash, on an agent of its own.
	e := newEnv(t)
	fx := newSideEffects()
	h := e.host(t, "clean", local, withTools(t, fx.tool(t, "safe", chat.Idempotent), fx.tool(t, "risky", chat.Unsafe)))
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: twoTools}); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	settled(t, e, "clean")
	want, err := e.store.Usage("clean")
	if err != nil || want.Turns != 1 || want.Output == 0 {
		t.Fatalf("usage of the uninterrupted turn = %+v, %v", want, err)
	}

	// From the first tool call's chunk on, the chunks go to another
	// server's log: never to this one, as if the process died first.
	lost := &losingBatcher{real: e.batcher, lost: runBatcher(t, eventlogtest.OpenOn(t, eventlogtest.RunServer(t, eventlogtest.ServerOptions{}), eventlog.Config{}))}
	e.chunks = lost
	fx2 := newSideEffects()
	tools := withTools(t, fx2.tool(t, "safe", chat.Idempotent), fx2.tool(t, "risky", chat.Unsafe))
	h = e.host(t, "a1", local, tools)
	reached := make(chan struct{}, 1)
	chat.StopAt(h.a, func(ctx context.Context, point string) error {
		if point != "tools-stashed" || !lost.losing() {
			return nil
		}
		reached <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: twoTools})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, reached)
	h.r.Close()
	e.chunks = nil

	// The crash state: the usage stashed, no tool call in the stream.
	if cs, _ := streamOf(t, e.lg, "a1", turn.StreamID); count(cs, chunk.ToolInputStart) != 0 {
		t.Fatalf("the stream holds a tool call: %+v", cs)
	}
	rows := runs(t, e, "a1")
	if len(rows) != 1 || !bytes.Contains(rows[0].Snapshot, []byte(`"stepUsage"`)) {
		t.Fatalf("runs = %+v, want the turn's fiber with the step's usage stashed", rows)
	}

	recoverHost(t, e, "a1", local, tools)
	if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnCompleted {
		t.Fatalf("recovered turn = %s %q", tr.Status, tr.Error)
	}
	msgs := settled(t, e, "a1")
	got, err := e.store.Usage("a1")
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("usage after recovery = %+v, uninterrupted = %+v", got, want)
	}
	if len(msgs) != 2 {
		t.Fatalf("%d messages, want 2", len(msgs))
	}
	started, completed := fx2.counts()
	for _, p := range toolParts(msgs[1]) {
		if p.State != chat.ToolOutput || started[p.ToolCallID] != 1 || completed[p.ToolCallID] != 1 {
			t.Errorf("%s: state %s, started %d, completed %d", p.ToolName, p.State, started[p.ToolCallID], completed[p.ToolCallID])
		}
	}
	cs, _ := streamOf(t, e.lg, "a1", turn.StreamID)
	checkStream(t, cs)
}

// losingBatcher adds chunks to real until one starts a tool call, and
// from then on to lost (another log): they are never stored in real's
// (go test ./chat -args -pack: also when packed into one record).
type losingBatcher struct {
	real, lost *eventlog.Batcher
	mu         sync.Mutex
	on         bool
	held       map[*eventlog.Pending]bool
}

func (l *losingBatcher) losing() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.on
}

func (l *losingBatcher) Add(ctx context.Context, e eventlog.Event, opts ...eventlog.AddOption) (*eventlog.Pending, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.on && strings.Contains(string(e.Data), `"`+chunk.ToolInputStart+`"`) {
		l.on = true
	}
	if !l.on {
		return l.real.Add(ctx, e, opts...)
	}
	p, err := l.lost.Add(ctx, e, opts...)
	if err == nil {
		if l.held == nil {
			l.held = map[*eventlog.Pending]bool{}
		}
		l.held[p] = true
	}
	return p, err
}

// Replace grows the record p where it went; a tool call's chunk packed
// into a record of real's is refused (not replaced), so that the writer
// adds it as a record of its own, to lost.
func (l *losingBatcher) Replace(p *eventlog.Pending, data json.RawMessage) (bool, error) {
	l.mu.Lock()
	held := l.held[p]
	if !held && strings.Contains(string(data), `"`+chunk.ToolInputStart+`"`) {
		l.on = true
		l.mu.Unlock()
		return false, nil
	}
	l.mu.Unlock()
	if held {
		return l.lost.Replace(p, data)
	}
	return l.real.Replace(p, data)
}
