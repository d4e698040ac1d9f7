package fiber_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

// Complete appends the caller's events and fiber.completed in one chain,
// in order; the fiber is over from then (no stash, no second end), and
// its row leaves the runs table.
func TestComplete(t *testing.T) {
	e := newEnv(t)
	r := e.runner(t, fiber.Config{})
	ctx := t.Context()
	var stashErr, againErr error
	err := r.Run(ctx, "work", func(ctx context.Context, f *fiber.Fiber) error {
		a, err := eventlog.NewEvent(agent, "app.done", map[string]int{"n": 1})
		if err != nil {
			return err
		}
		b, err := eventlog.NewEvent(agent, "app.usage", map[string]int{"n": 2})
		if err != nil {
			return err
		}
		seq, err := fiber.Complete(ctx, a, b)
		if err != nil {
			return err
		}
		if last, _ := e.lg.LastSeq(ctx, eventlog.Filter{Agent: agent}); last != seq {
			t.Errorf("Complete returned %d, the agent's last event is %d", seq, last)
		}
		stashErr = f.Stash(ctx, 1)
		_, againErr = f.Complete(ctx)
		return errors.New("an error after Complete is logged, not recorded")
	})
	if err != nil {
		t.Fatalf("Run = %v, want nil: the fiber completed", err)
	}
	if !errors.Is(stashErr, fiber.ErrFiberDone) || !errors.Is(againErr, fiber.ErrFiberDone) {
		t.Errorf("after Complete: Stash = %v, Complete = %v, want ErrFiberDone", stashErr, againErr)
	}
	if got, want := e.eventTypes(t), "fiber.started app.done app.usage fiber.completed"; got != want {
		t.Fatalf("events = %s, want %s", got, want)
	}
	if rows := e.rows(t); len(rows) != 0 {
		t.Fatalf("rows after Complete: %+v", rows)
	}
	if _, err := fiber.Complete(ctx); !errors.Is(err, fiber.ErrNoFiber) {
		t.Errorf("Complete outside a fiber = %v, want ErrNoFiber", err)
	}
}

// An event of another agent is refused before anything is written.
func TestCompleteOtherAgent(t *testing.T) {
	e := newEnv(t)
	r := e.runner(t, fiber.Config{})
	var got error
	err := r.Run(t.Context(), "work", func(ctx context.Context, f *fiber.Fiber) error {
		ev, err := eventlog.NewEvent("someone-else", "app.done", nil)
		if err != nil {
			return err
		}
		_, got = f.Complete(ctx, ev)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(got, fiber.ErrInvalid) {
		t.Fatalf("Complete with another agent's event = %v, want ErrInvalid", got)
	}
	if n := len(e.events(t, "app.done")); n != 0 {
		t.Fatalf("%d app.done stored", n)
	}
}

// dyingLog is a Log without AppendAll whose process dies before its
// (budget+1)th append: that append and every later one store nothing.
type dyingLog struct {
	lg     *eventlog.Log
	mu     sync.Mutex
	budget int
}

// Append appends e while the budget lasts.
func (d *dyingLog) Append(ctx context.Context, e eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	d.mu.Lock()
	ok := d.budget > 0
	d.budget--
	d.mu.Unlock()
	if !ok {
		return 0, errors.New("test: the process is dead")
	}
	return d.lg.Append(ctx, e, opts...)
}

// LastSeq reads through.
func (d *dyingLog) LastSeq(ctx context.Context, f eventlog.Filter) (eventlog.Seq, error) {
	return d.lg.LastSeq(ctx, f)
}

// A crash inside Complete's chain leaves a prefix of it stored and never
// fiber.completed without the events before it: the fiber stays in the
// runs table and is recovered, and its recovery finds the prefix. Killed
// after the whole chain, it is over: nothing to recover. With CompleteIn
// the end rides in the chain's last event, so the two are stored together
// or not at all.
func TestCompleteCrash(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chain  string // the records stored, in order
		inline bool
	}{
		{"Complete", "fiber.started app.done app.usage fiber.completed", false},
		{"CompleteIn", "fiber.started app.done app.usage", true}, // app.usage carries the end
	} {
		records := strings.Fields(tc.chain)
		for budget := 1; budget <= len(records); budget++ {
			t.Run(fmt.Sprintf("%s after %d writes", tc.name, budget), func(t *testing.T) {
				e := newEnv(t)
				d := &dyingLog{lg: e.lg, budget: budget}
				r, err := fiber.New(fiber.Config{Log: d, Table: e.table, Agent: agent})
				if err != nil {
					t.Fatal(err)
				}
				_ = r.Run(t.Context(), "work", func(ctx context.Context, f *fiber.Fiber) error {
					a, _ := eventlog.NewEvent(agent, "app.done", nil)
					b, _ := eventlog.NewEvent(agent, "app.usage", nil)
					complete := f.Complete
					if tc.inline {
						complete = f.CompleteIn
					}
					_, err := complete(ctx, a, b)
					return err
				})
				r.Close()

				want := strings.Join(records[:budget], " ")
				if got := e.eventTypes(t); got != want {
					t.Fatalf("stored %q, want the prefix %q", got, want)
				}
				e2 := e.restart(t)
				var recovered []string
				r2 := e2.runner(t, fiber.Config{Hooks: fiber.Hooks{OnFiberRecovered: func(ctx context.Context, rec fiber.Recovered) error {
					recovered = append(recovered, rec.Name)
					return nil
				}}})
				if err := r2.Recover(t.Context()); err != nil {
					t.Fatal(err)
				}
				r2.Wait()
				if budget == len(records) {
					if len(recovered) != 0 {
						t.Fatalf("a completed fiber was recovered: %v", recovered)
					}
					return
				}
				if len(recovered) != 1 {
					t.Fatalf("recovered %v, want the fiber once", recovered)
				}
			})
		}
	}
}

// CompleteIn stores the fiber's end in the chain's last event (its
// Completes field) instead of a fiber.completed of its own: one record
// fewer, the fiber over all the same (its row leaves the runs table, and
// Records reads the end back from the event), and without events it is
// Complete.
func TestCompleteIn(t *testing.T) {
	e := newEnv(t)
	r := e.runner(t, fiber.Config{})
	ctx := t.Context()
	var id string
	var stashErr error
	err := r.Run(ctx, "work", func(ctx context.Context, f *fiber.Fiber) error {
		id = f.ID()
		a, _ := eventlog.NewEvent(agent, "app.done", map[string]int{"n": 1})
		b, _ := eventlog.NewEvent(agent, "app.usage", map[string]int{"n": 2})
		if _, err := f.CompleteIn(ctx, a, b); err != nil {
			return err
		}
		stashErr = f.Stash(ctx, 1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(stashErr, fiber.ErrFiberDone) {
		t.Errorf("Stash after CompleteIn = %v, want ErrFiberDone", stashErr)
	}
	if got, want := e.eventTypes(t), "fiber.started app.done app.usage"; got != want {
		t.Fatalf("events = %s, want %s", got, want)
	}
	evs := e.events(t, "app.done", "app.usage")
	if evs[0].Completes != "" || evs[1].Completes != id {
		t.Fatalf("completes = %q, %q; want none, then the fiber %q", evs[0].Completes, evs[1].Completes, id)
	}
	recs := fiber.Records(evs[1])
	if len(recs) != 2 || recs[0].Completes != "" || recs[0].Type != "app.usage" {
		t.Fatalf("Records = %+v; want app.usage without its carried end, then the end", recs)
	}
	if end := recs[1]; end.Type != fiber.EventCompleted || end.Seq != evs[1].Seq || string(end.Data) != fmt.Sprintf(`{"id":%q}`, id) {
		t.Fatalf("carried end = %+v; want the fiber.completed of %q at seq %d", end, id, evs[1].Seq)
	}
	if fiber.Carries(evs[0]) || len(fiber.Records(evs[0])) != 1 {
		t.Fatal("an event that carries nothing stands for more than itself")
	}
	if rows := e.rows(t); len(rows) != 0 {
		t.Fatalf("rows after CompleteIn: %+v", rows)
	}

	// Without events it is Complete.
	if err := r.Run(ctx, "bare", func(ctx context.Context, f *fiber.Fiber) error {
		_, err := f.CompleteIn(ctx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got, want := e.eventTypes(t), "fiber.started app.done app.usage fiber.started fiber.completed"; got != want {
		t.Fatalf("events = %s, want %s", got, want)
	}
	if rows := e.rows(t); len(rows) != 0 {
		t.Fatalf("rows: %+v", rows)
	}
}
