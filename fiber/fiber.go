package fiber

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// Fiber is one run of a durable function. It is handed to the function and
// carried by its context; its methods are safe for concurrent use.
type Fiber struct {
	r         *Runner
	id, name  string
	createdAt time.Time
	attempt   int
	resumed   bool // a recovered fiber: steps look up earlier ops

	// Set by Runner.own; read by Runner.disown.
	slot    *slot
	release func()
	cancel  context.CancelFunc

	// writeMu serializes the fiber's appends with its end, so the log order
	// of stashes is their call order and nothing of the fiber is appended
	// after its end.
	writeMu sync.Mutex

	mu struct {
		sync.Mutex
		done     bool
		snapshot json.RawMessage
		steps    map[string]int // step key -> calls so far in this run
		// prestarted is the op ID whose op.started fiber.started carried
		// (FirstStep), until its Step takes it.
		prestarted string
	}
}

func (r *Runner) newFiber(id, name string, createdAt time.Time, attempt int, resumed bool, snapshot json.RawMessage) *Fiber {
	f := &Fiber{r: r, id: id, name: name, createdAt: createdAt, attempt: attempt, resumed: resumed, cancel: func() {}}
	f.mu.snapshot = snapshot
	f.mu.steps = map[string]int{}
	return f
}

type ctxKey struct{}

// bind returns the context fn runs under: parent's values and cancellation,
// cancelled as well when stop is, and carrying f.
func (f *Fiber) bind(parent, stop context.Context) context.Context {
	ctx, cancel := context.WithCancel(context.WithValue(parent, ctxKey{}, f))
	unhook := context.AfterFunc(stop, cancel)
	f.cancel = func() { unhook(); cancel() }
	return ctx
}

// FromContext returns the fiber ctx runs in, if any.
func FromContext(ctx context.Context) (*Fiber, bool) {
	f, ok := ctx.Value(ctxKey{}).(*Fiber)
	return f, ok
}

// ID returns the fiber's ID, unique and stable across recoveries.
func (f *Fiber) ID() string { return f.id }

// Name returns the name the fiber was started with.
func (f *Fiber) Name() string { return f.name }

// Attempt returns 0 for a fiber's first run and the recovery attempt for a
// resumed one.
func (f *Fiber) Attempt() int { return f.attempt }

// CreatedAt returns when the fiber was first started.
func (f *Fiber) CreatedAt() time.Time { return f.createdAt }

// Snapshot returns the fiber's latest snapshot: the last one stashed in this
// run, or the one it was resumed from; nil if none. The caller owns the
// returned slice.
func (f *Fiber) Snapshot() json.RawMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append(json.RawMessage(nil), f.mu.snapshot...)
}

func (f *Fiber) markDone() {
	f.mu.Lock()
	f.mu.done = true
	f.mu.Unlock()
}

func (f *Fiber) isDone() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.done
}

// StashOpt is an option of one Stash call.
type StashOpt func(*stashOpts)

type stashOpts struct {
	attempts *int
}

// WithAttempts records n (>= 0) as the fiber's recovery attempt count along
// with the snapshot: the next recovery is attempt n+1. A fiber that made
// progress since its last recovery stashes WithAttempts(0) (or the count
// of its own budget), so Config.MaxAttempts caps recoveries without
// progress, not recoveries in all.
func WithAttempts(n int) StashOpt {
	return func(o *stashOpts) { o.attempts = &n }
}

// Stash records v, encoded as JSON (a json.RawMessage is taken as it is), as
// the fiber's snapshot, fully replacing the previous one. It returns once
// fiber.stashed is durable: if the process dies after Stash returned, the
// recovery hook sees v (or a later snapshot). Concurrent stashes of one fiber
// are recorded in call order; each fiber writes only its own snapshot.
// WithAttempts also resets the fiber's recovery attempt count.
//
// Errors: ErrInvalid (v cannot be encoded, a negative attempt count),
// ErrFiberDone, or an append error (the previous snapshot then stays the
// recorded one).
func (f *Fiber) Stash(ctx context.Context, v any, opts ...StashOpt) error {
	data, attempts, err := stashData(v, opts)
	if err != nil {
		return err
	}
	f.writeMu.Lock()
	defer f.writeMu.Unlock()
	if f.isDone() {
		return ErrFiberDone
	}
	start := time.Now()
	if _, err := f.r.append(ctx, EventStashed, payload{ID: f.id, Snapshot: data, Attempts: attempts}); err != nil {
		return fmt.Errorf("fiber: stash %s: %w", f.id, err)
	}
	f.r.metrics.stashSeconds.Observe(time.Since(start).Seconds())
	f.mu.Lock()
	f.mu.snapshot = data
	f.mu.Unlock()
	return nil
}

// stashData encodes a snapshot and its options.
func stashData(v any, opts []StashOpt) (json.RawMessage, *int, error) {
	var o stashOpts
	for _, opt := range opts {
		opt(&o)
	}
	if o.attempts != nil && *o.attempts < 0 {
		return nil, nil, invalidf("stash: negative attempt count %d", *o.attempts)
	}
	data, err := encodeJSON("snapshot", v)
	return data, o.attempts, err
}

// Stash stashes v for the fiber ctx runs in, from any code the fiber's
// function calls (the Go analogue of AsyncLocalStorage). Outside a fiber it
// returns ErrNoFiber. See (*Fiber).Stash.
func Stash(ctx context.Context, v any, opts ...StashOpt) error {
	f, ok := FromContext(ctx)
	if !ok {
		return ErrNoFiber
	}
	return f.Stash(ctx, v, opts...)
}
