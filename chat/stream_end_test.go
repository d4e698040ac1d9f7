package chat_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/verify"
)

// breakingBatcher is the real chunk batcher, but its n-th Add fails with
// err: a stream writer whose state broke under it (as a chunk queued
// without its stream's fence), once.
type breakingBatcher struct {
	chunk.Batcher
	mu  sync.Mutex
	n   int
	err error
}

func (b *breakingBatcher) Add(ctx context.Context, e eventlog.Event, opts ...eventlog.AddOption) (*eventlog.Pending, error) {
	b.mu.Lock()
	b.n--
	broken := b.n == 0
	b.mu.Unlock()
	if broken {
		return nil, b.err
	}
	return b.Batcher.Add(ctx, e, opts...)
}

// TestEveryTurnEndsItsStream: a turn whose stream writer fails mid-turn,
// for a reason the turn cannot recover from, ends its stream: the turn is
// failed from the log, after an error chunk written by a writer rebuilt
// from the stored stream. One terminal chunk, one outcome, verify clean.
func TestEveryTurnEndsItsStream(t *testing.T) {
	e := newEnv(t)
	e.chunks = &breakingBatcher{Batcher: e.batcher, n: 4, err: errors.New("chunk writer broken")}
	h := e.host(t, "a1", &fake{scripts: []script{passLocal()}}, nil)
	turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: "tell me a story", RequestID: "edge-5"})
	if err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	cs, _ := streamOf(t, e.lg, "a1", turn.StreamID)
	if n := count(cs, chunk.Finish) + count(cs, chunk.Error) + count(cs, chunk.Abort); n != 1 || cs[len(cs)-1].Type != chunk.Error {
		t.Fatalf("stream %+v: want it to end with one error chunk", cs)
	}
	if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnFailed {
		t.Fatalf("turn = %+v, want failed", tr)
	}
	if got := turnsOf(t, e.lg, "a1"); len(got) != 1 {
		t.Fatalf("turns per message = %v", got)
	}
	rep, err := verify.Check(t.Context(), e.lg, verify.Options{Acked: []verify.Ack{{Agent: "a1", ID: "edge-5"}}})
	if err != nil || !rep.OK() {
		t.Fatalf("verify: %v\n%s", err, rep)
	}
}
