package host

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/ownership"
)

// TestCommandsWaitForAPartitionsRecovery: the owner's side of the route
// (owned) runs a command only once its partition's recovery started, that
// is once the views caught the partition up: a read of a partition just
// taken otherwise answered from views that had not applied the previous
// owner's events (TestUpgrade read an empty conversation). Before that the
// command waits, and fails with a 503 when its context ends; a partition
// released while it waits, or not held, is the retryable not-owner 503.
func TestCommandsWaitForAPartitionsRecovery(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	own, err := ownership.New(t.Context(), ownership.Config{Conn: eventlogtest.Connect(t, s), Node: "n1", Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	h := New(Config{})
	h.own = own
	const agent = "steps:a"
	p := h.partitionOf(agent)
	pctx, release := context.WithCancel(t.Context())
	defer release()
	pt := &part{ctx: pctx, recovered: make(chan struct{})}
	h.mu.Lock()
	h.mu.parts = map[int]*part{p: pt}
	h.mu.Unlock()

	reached := make(chan struct{}, 4)
	run := h.owned(func(context.Context, Command) (json.RawMessage, error) {
		reached <- struct{}{}
		return json.RawMessage(`{}`), nil
	})
	cmd := Command{Agent: agent, Verb: "fibers"}

	// Held, not recovered: the command waits until its context ends.
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	_, err = run(ctx, cmd)
	cancel()
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, eventlog.ErrNotOwner) {
		t.Fatalf("a command before the partition's recovery: %v, want a 503 for the wait", err)
	}
	if len(reached) > 0 {
		t.Fatal("a command ran before its partition's recovery started")
	}

	// Recovered while it waits: it runs.
	done := make(chan error, 1)
	go func() {
		_, err := run(t.Context(), cmd)
		done <- err
	}()
	close(pt.recovered)
	if err := <-done; err != nil {
		t.Fatalf("a command once the partition recovered: %v", err)
	}
	<-reached

	// Released while it waits, and not held: not the owner, retryable.
	waiting := &part{ctx: pctx, recovered: make(chan struct{})}
	h.mu.Lock()
	h.mu.parts[p] = waiting
	h.mu.Unlock()
	go func() {
		_, err := run(t.Context(), cmd)
		done <- err
	}()
	release()
	if err := <-done; !errors.Is(err, eventlog.ErrNotOwner) {
		t.Fatalf("a command whose partition was released while it waited: %v, want not the owner", err)
	}
	h.mu.Lock()
	delete(h.mu.parts, p)
	h.mu.Unlock()
	if _, err := run(t.Context(), cmd); !errors.Is(err, eventlog.ErrNotOwner) {
		t.Fatalf("a command of a partition not held: %v, want not the owner", err)
	}
	if len(reached) > 0 {
		t.Fatal("a command ran on a node that does not own its partition")
	}
}
