package fiber_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/nats-io/nats.go/jetstream"
)

// begun is an Along build: one app.begun event naming the fiber.
func begun(agentID string, ids *[]string) func(id string) ([]eventlog.Event, error) {
	return func(id string) ([]eventlog.Event, error) {
		*ids = append(*ids, id)
		ev, err := eventlog.NewEvent(agentID, "app.begun", map[string]string{"fiber": id})
		return []eventlog.Event{ev}, err
	}
}

// unchained is a Log without AppendAll.
type unchained struct{ fiber.Log }

// TestAlong: the events of Along are stored right after fiber.started,
// built with the fiber's ID, before the function runs, fenced as
// fiber.started is: after a stale AfterSeq, a build error or an event of
// another agent nothing is stored and the fiber does not run. A Log
// without AppendAll stores the same events, one append each.
func TestAlong(t *testing.T) {
	for _, chained := range []bool{true, false} {
		name := "chained"
		if !chained {
			name = "unchained"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			cfg := fiber.Config{Log: e.lg, Table: e.table, Agent: agent}
			if !chained {
				cfg.Log = unchained{e.lg}
			}
			r, err := fiber.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close() })
			ctx := t.Context()
			ran := 0
			fn := func(ctx context.Context, f *fiber.Fiber) error {
				ran++
				return nil
			}
			if err := r.Run(ctx, "other", fn); err != nil {
				t.Fatal(err)
			}
			stale, _ := e.lg.LastSeq(ctx, eventlog.Filter{Agent: agent})
			if err := r.Run(ctx, "another", fn); err != nil {
				t.Fatal(err)
			}
			last, _ := e.lg.LastSeq(ctx, eventlog.Filter{Agent: agent})
			var ids []string
			var out fiber.Alongside
			if err := r.Run(ctx, "w", fn, fiber.AfterSeq(stale), fiber.Along(begun(agent, &ids), &out)); !errors.Is(err, eventlog.ErrConflict) {
				t.Fatalf("Along after a stale sequence: %v, want ErrConflict", err)
			}
			boom := errors.New("boom")
			if err := r.Run(ctx, "w", fn, fiber.Along(func(string) ([]eventlog.Event, error) { return nil, boom }, &out)); !errors.Is(err, boom) {
				t.Fatalf("Along whose build failed: %v, want its error", err)
			}
			if err := r.Run(ctx, "w", fn, fiber.Along(begun("someone-else", &ids), &out)); !errors.Is(err, fiber.ErrInvalid) {
				t.Fatalf("Along with another agent's event: %v, want ErrInvalid", err)
			}
			if now, _ := e.lg.LastSeq(ctx, eventlog.Filter{Agent: agent}); now != last || ran != 2 {
				t.Fatalf("refused starts stored up to %d (from %d) and ran %d functions, want nothing stored, 2 ran", now, last, ran)
			}
			var id string
			err = r.Run(ctx, "w", func(ctx context.Context, f *fiber.Fiber) error {
				id = f.ID()
				if out.Err != nil || out.Seq == 0 {
					t.Errorf("the function ran before the events were stored: %+v", out)
				}
				return nil
			}, fiber.AfterSeq(last), fiber.Along(begun(agent, &ids), &out))
			if err != nil {
				t.Fatal(err)
			}
			evs := e.events(t)
			n := len(evs)
			if n < 3 || evs[n-3].Type != fiber.EventStarted || evs[n-2].Type != "app.begun" || evs[n-1].Type != fiber.EventCompleted {
				t.Fatalf("events %s, want fiber.started app.begun fiber.completed at the end", e.eventTypes(t))
			}
			if out.Seq != evs[n-2].Seq || ids[len(ids)-1] != id || decodeData(t, evs[n-2])["fiber"] != id {
				t.Fatalf("out %+v, app.begun at %d of fiber %v, built for %v, fiber %s", out, evs[n-2].Seq, decodeData(t, evs[n-2])["fiber"], ids, id)
			}
		})
	}
}

// cutLog stores a chain's first event only and refuses the rest, as a
// chain broken after its first link by a refusal.
type cutLog struct{ *eventlog.Log }

func (l cutLog) AppendAll(ctx context.Context, evs []eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	seq, err := l.Log.Append(ctx, evs[0], opts...)
	if err != nil {
		return 0, err
	}
	return seq, eventlog.ErrTooLarge
}

// TestAlongPrefix: a chain stored only up to fiber.started starts the
// fiber (it is in the log), and says so: out.Err is the rest's refusal.
func TestAlongPrefix(t *testing.T) {
	e := newEnv(t)
	r, err := fiber.New(fiber.Config{Log: cutLog{e.lg}, Table: e.table, Agent: agent})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	var ids []string
	var out fiber.Alongside
	ran := false
	err = r.Run(t.Context(), "w", func(context.Context, *fiber.Fiber) error { ran = true; return nil }, fiber.Along(begun(agent, &ids), &out))
	if err != nil || !ran {
		t.Fatalf("Run = %v, ran %v: want the fiber started", err, ran)
	}
	if !errors.Is(out.Err, eventlog.ErrTooLarge) || out.Seq != 0 {
		t.Fatalf("out = %+v, want the rest's refusal", out)
	}
	if got, want := e.eventTypes(t), "fiber.started fiber.completed"; got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
}

// refusingChains is the real log behind a stream that refuses the next
// chains (refusals; single appends go through).
type refusingChains struct {
	*eventlog.Log
	refusals
}

func (l *refusingChains) AppendAll(ctx context.Context, evs []eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	if err := l.next(); err != nil {
		return 0, err
	}
	return l.Log.AppendAll(ctx, evs, opts...)
}

// TestAlongWaitsOutAnElection: a start chain refused unwritten (10008,
// a leader election) is sent again whole, so each event is stored once; a
// chain whose answer was lost is not sent again: fiber.started is settled
// (the fiber starts), and its events are reported of unknown fate.
func TestAlongWaitsOutAnElection(t *testing.T) {
	electing := &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"refused while electing", electing, "fiber.started app.begun fiber.completed"},
		{"answer lost", jetstream.ErrNoStreamResponse, "fiber.started fiber.completed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			lg := &refusingChains{Log: e.lg}
			lg.set(2, c.err)
			r, err := fiber.New(fiber.Config{Log: lg, Table: e.table, Agent: agent, BackoffBase: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close() })
			var ids []string
			var out fiber.Alongside
			noop := func(context.Context, *fiber.Fiber) error { return nil }
			if err := r.Run(t.Context(), "w", noop, fiber.Along(begun(agent, &ids), &out)); err != nil {
				t.Fatal(err)
			}
			if got := e.eventTypes(t); got != c.want {
				t.Fatalf("events %s, want %s", got, c.want)
			}
			if unknown := errors.Is(out.Err, eventlog.ErrUnconfirmed); unknown != (c.err != electing) || (out.Err == nil) != (c.err == electing) {
				t.Fatalf("out = %+v", out)
			}
		})
	}
}
