package fiber_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/nats-io/nats.go/jetstream"
)

// refusals refuses the next n writes with err, as JetStream does while a
// stream elects its leader.
type refusals struct {
	mu  sync.Mutex
	n   int
	err error
}

// next returns the refusal of the next write, or nil to let it through.
func (r *refusals) next() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == 0 {
		return nil
	}
	r.n--
	return r.err
}

// set refuses the next n writes with err.
func (r *refusals) set(n int, err error) {
	r.mu.Lock()
	r.n, r.err = n, err
	r.mu.Unlock()
}

// refusingLog is the real log behind a stream that refuses the next
// appends (refusals).
type refusingLog struct {
	*eventlog.Log
	refusals
}

func (l *refusingLog) Append(ctx context.Context, e eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	if err := l.next(); err != nil {
		return 0, err
	}
	return l.Log.Append(ctx, e, opts...)
}

// TestAppendWaitsOutAnElection: appends JetStream refused unwritten
// (10008, a leader election) are sent again, bounded, so the fiber goes on
// and each event is stored once; an append whose answer was lost (it may
// be stored) is not sent again.
func TestAppendWaitsOutAnElection(t *testing.T) {
	electing := &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
	for _, c := range []struct {
		name string
		err  error
		ok   bool
	}{
		{"refused while electing", electing, true},
		{"answer lost", jetstream.ErrNoStreamResponse, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			lg := &refusingLog{Log: e.lg}
			r, err := fiber.New(fiber.Config{Log: lg, Table: e.table, Agent: agent, BackoffBase: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close() })
			err = r.Run(t.Context(), "w", func(ctx context.Context, f *fiber.Fiber) error {
				lg.set(3, c.err)
				return f.Stash(ctx, map[string]int{"step": 1})
			})
			if c.ok != (err == nil) {
				t.Fatalf("Run = %v, want ok=%v", err, c.ok)
			}
			if !c.ok {
				if !errors.Is(err, jetstream.ErrNoStreamResponse) {
					t.Fatalf("Run = %v, want the lost answer", err)
				}
				return
			}
			if n := len(e.events(t, fiber.EventStashed)); n != 1 {
				t.Fatalf("%d fiber.stashed stored, want 1", n)
			}
		})
	}
}
