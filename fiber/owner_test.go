package fiber_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/fiber"
)

// writtenAfter returns the agent's events stored after seq.
func writtenAfter(t *testing.T, e *env, seq eventlog.Seq) []eventlog.Event {
	t.Helper()
	evs, err := e.lg.Read(t.Context(), eventlog.Filter{Agent: agent}, seq, 0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func lastSeq(t *testing.T, e *env) eventlog.Seq {
	t.Helper()
	seq, err := e.lg.LastSeq(t.Context(), eventlog.Filter{Agent: agent})
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// TestOwnerLostWritesNothing: on a fenced log, a fiber whose write is
// refused because the process no longer owns the agent writes nothing
// more, not even fiber.failed, also when the ownership comes back at once
// (a lease that lapsed and was renewed late); its row stays, nothing is
// reported as a failure, and the owner's next recovery ends it once.
func TestOwnerLostWritesNothing(t *testing.T) {
	srv := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	own := &eventlogtest.Owner{}
	own.Grant(agent, eventlog.Token{Node: "n1", Epoch: 1})
	e := openEnvWith(t, srv, eventlog.Config{Owner: own}, nil)
	sink := newErrSink()
	r := e.runner(t, fiber.Config{Hooks: fiber.Hooks{OnError: sink.OnError}})

	stashed, lost := make(chan struct{}), make(chan struct{})
	id, err := r.Go(t.Context(), "work", func(ctx context.Context, f *fiber.Fiber) error {
		if err := fiber.Stash(ctx, 1); err != nil {
			return err
		}
		close(stashed)
		<-lost
		return fiber.Stash(ctx, 2) // refused: the lease lapsed
	})
	if err != nil {
		t.Fatal(err)
	}
	<-stashed
	mark := lastSeq(t, e)
	own.Lapse(agent, 1)
	close(lost)
	r.Wait()
	if evs := writtenAfter(t, e, mark); len(evs) != 0 {
		t.Fatalf("the fiber wrote %s after its write was refused as not the owner's", evs[0].Type)
	}
	if errs := sink.all(); len(errs) != 0 {
		t.Fatalf("reported %v, want nothing: the new owner decides", errs)
	}
	if rows := e.rows(t); len(rows) != 1 || rows[0].ID != id {
		t.Fatalf("rows = %+v, want the fiber's, left for recovery", rows)
	}

	// A recovery hook that finds the agent gone stops: no second attempt
	// (fiber.recovered), no abandonment.
	own.Grant(agent, eventlog.Token{Node: "n1", Epoch: 2})
	calls := 0
	r2 := e.runner(t, fiber.Config{Hooks: fiber.Hooks{
		OnError: sink.OnError,
		OnFiberRecovered: func(ctx context.Context, rec fiber.Recovered) error {
			calls++
			return fmt.Errorf("resume: %w", eventlog.ErrNotOwner)
		},
	}})
	if err := r2.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := e.events(t, fiber.EventRecovered, fiber.EventAbandoned, fiber.EventFailed, fiber.EventCompleted); calls != 1 || len(got) != 1 {
		t.Fatalf("hook calls %d, events %d; want one attempt recorded and nothing after it", calls, len(got))
	}

	// The owner's recovery ends the fiber, once.
	r3 := e.runner(t, fiber.Config{Hooks: fiber.Hooks{
		OnError:          sink.OnError,
		OnFiberRecovered: func(ctx context.Context, rec fiber.Recovered) error { return nil },
	}})
	if err := r3.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if ends := e.events(t, fiber.EventCompleted, fiber.EventFailed, fiber.EventAbandoned); len(ends) != 1 || ends[0].Type != fiber.EventCompleted {
		t.Fatalf("ends = %+v, want one fiber.completed", ends)
	}
	if errs := sink.all(); len(errs) != 0 {
		t.Fatalf("reported %v", errs)
	}
}
