package fiber

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/forever-agents/forever/eventlog"
)

// Fiber is one run of a durable function. It is handed to the function and
// carried by its context; its methods are safe for concurrent use.
type Fiber struct {
	r         *Runner
	id, name  string
	createdAt time.Time
	attempt   int
	resumed   bool // a recovered fiber: steps look up earlier ops
	unique    bool // at most one live fiber of its name (Unique)
	// traceParent is the span a resumed fiber was started under
	// (Recovered.TraceParent).
	traceParent string

	// slot is set by Runner.own and read by Runner.disown.
	slot   *slot
	cancel context.CancelFunc

	// writeMu serializes the fiber's appends with its end, so the log order
	// of stashes is their call order and nothing of the fiber is appended
	// after its end.
	writeMu sync.Mutex

	mu struct {
		sync.Mutex
		done bool
		// completed is set once Complete stored fiber.completed: the
		// Runner appends nothing when the function returns.
		completed bool
		snapshot  json.RawMessage
		steps     map[string]int // step key -> calls so far in this run
		// prestarted is the op ID whose op.started fiber.started carried
		// (FirstStep), until its Step takes it.
		prestarted string
		// resetPending is set while a recovered fiber's attempt count is
		// not yet reset in this run: its first progress (a step completed
		// or a snapshot changed) records attempts 0 with it.
		resetPending bool
		// release drops the fiber's keepalive reference: set by
		// Runner.own, nil while the fiber is Idle and once released.
		release func()
	}
}

// setRelease replaces the fiber's keepalive release and returns the one it
// had.
func (f *Fiber) setRelease(rel func()) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.mu.release
	f.mu.release = rel
	return old
}

// Idle releases the fiber's keepalive reference while the fiber waits for
// work done elsewhere (another agent's turn), so that its agent can be
// deactivated meanwhile; busy takes a reference again. A fiber that is idle
// when its Runner closes (the host deactivates the idle agent) has its
// context cancelled like any other: its function returns, nothing is
// appended, and its row stays for the next Recover, which resumes it. Idle
// is for a fiber whose wait is durable (what it waits for is in its
// snapshot or the log), never for one in the middle of a side effect.
//
// Calling busy more than once, or after the fiber ended, does nothing. A
// Runner without a KeepAlive holds no reference, and Idle does nothing.
func (f *Fiber) Idle() (busy func()) {
	if rel := f.setRelease(nil); rel != nil {
		rel()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if f.r.cfg.KeepAlive == nil || f.isDone() {
				return
			}
			rel := f.r.cfg.KeepAlive.Acquire()
			f.mu.Lock()
			if f.mu.done || f.mu.release != nil {
				f.mu.Unlock()
				rel()
				return
			}
			f.mu.release = rel
			f.mu.Unlock()
		})
	}
}

func (r *Runner) newFiber(id, name string, createdAt time.Time, attempt int, resumed bool, snapshot json.RawMessage) *Fiber {
	f := &Fiber{r: r, id: id, name: name, createdAt: createdAt, attempt: attempt, resumed: resumed, cancel: func() {}}
	f.mu.snapshot = snapshot
	f.mu.steps = map[string]int{}
	f.mu.resetPending = resumed && attempt > 0
	return f
}

type ctxKey struct{}

// bind returns the context fn runs under: parent's values and cancellation,
// cancelled as well when stop is, and carrying f.
func (f *Fiber) bind(parent, stop context.Context) context.Context {
	ctx, cancel := context.WithCancel(context.WithValue(f.traceContext(parent), ctxKey{}, f))
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
	next     string // AnnounceStep's key
}

// WithAttempts records n (>= 0) as the fiber's recovery attempt count along
// with the snapshot: the next recovery is attempt n+1. Without it, the
// first progress of a recovered fiber resets the count to 0 by itself (see
// Stash); a fiber that keeps a budget of its own stashes WithAttempts with
// its count, and from then on in that run its own count is the one
// recorded (the default reset is off until the next recovery).
func WithAttempts(n int) StashOpt {
	return func(o *stashOpts) { o.attempts = &n }
}

// AnnounceStep records in the stash that the fiber's next Step with key
// has started, as ThenStep does in a step's op.completed: that Step writes
// no op.started of its own, so a stash followed at once by a step costs
// one synced write before the step's function runs, not two. The op counts
// as started from the stash on: after a crash before it ran, a recovered
// fiber runs it again with the same op ID (or gets ErrMaybeExecuted for an
// Unsafe step), as after a crash between op.started and the effect. Give
// it only for a step that follows the stash (a fiber that calls another
// key leaves the announced op started and never completed, which its end
// clears), and only where every reader of the log knows it: a runs table
// or verify of a release before it misses the announcement (fiber.stashed
// with nextOpId). Not an option of ThenStash (use ThenStep there).
func AnnounceStep(key string) StashOpt {
	return func(o *stashOpts) { o.next = key }
}

// Stash records v, encoded as JSON (a json.RawMessage is taken as it is), as
// the fiber's snapshot, fully replacing the previous one. It returns once
// fiber.stashed is durable: if the process dies after Stash returned, the
// recovery hook sees v (or a later snapshot). Concurrent stashes of one fiber
// are recorded in call order; each fiber writes only its own snapshot.
//
// A stash that changes the snapshot is progress: the first one of a
// recovered fiber records attempts 0 with it, so Config.MaxAttempts counts
// recoveries without progress. Stashing the snapshot the fiber already has
// (the one it resumed from, or its last) is not progress and resets
// nothing. WithAttempts(n) records n instead.
//
// Errors: ErrInvalid (v cannot be encoded, a negative attempt count),
// ErrFiberDone, or an append error (the previous snapshot then stays the
// recorded one).
func (f *Fiber) Stash(ctx context.Context, v any, opts ...StashOpt) error {
	data, o, err := stashData(v, opts)
	if err != nil {
		return err
	}
	return f.stash(ctx, data, o.attempts, true, o.next)
}

// stash appends fiber.stashed with data; progress says whether a changed
// snapshot counts as progress (not for a step answered from its record);
// next, when set, is the key of the step the stash announces as started
// (AnnounceStep).
func (f *Fiber) stash(ctx context.Context, data json.RawMessage, attempts *int, progress bool, next string) error {
	f.writeMu.Lock()
	defer f.writeMu.Unlock()
	if f.isDone() {
		return ErrFiberDone
	}
	f.mu.Lock()
	progress = progress && !bytes.Equal(data, f.mu.snapshot)
	f.mu.Unlock()
	start := time.Now()
	p := payload{ID: f.id, Snapshot: data, Attempts: attempts}
	if next != "" {
		p.NextOpID, p.NextKey = f.peekOp(next), next
	}
	if _, err := f.appendLocked(ctx, EventStashed, p, progress); err != nil {
		return fmt.Errorf("fiber: stash %s: %w", f.id, err)
	}
	f.r.metrics.stashSeconds.Observe(time.Since(start).Seconds())
	f.mu.Lock()
	f.mu.snapshot = data
	if p.NextOpID != "" {
		f.mu.prestarted = p.NextOpID
	}
	f.mu.Unlock()
	return nil
}

// appendLocked appends one of the fiber's events. progress marks an event
// that records progress (a step's new result, a changed snapshot): the
// first one of a recovered fiber carries attempts 0 unless p sets its own
// count. Once an event with a count is durable, the run's count is
// recorded and later events carry none of their own.
// REQUIRES: f.writeMu held.
func (f *Fiber) appendLocked(ctx context.Context, typ string, p payload, progress bool) (eventlog.Seq, error) {
	f.mu.Lock()
	if progress && p.Attempts == nil && f.mu.resetPending {
		zero := 0
		p.Attempts = &zero
	}
	f.mu.Unlock()
	seq, err := f.r.append(ctx, typ, p)
	if err == nil && p.Attempts != nil {
		f.mu.Lock()
		f.mu.resetPending = false
		f.mu.Unlock()
	}
	return seq, err
}

// stashData encodes a snapshot and its options.
func stashData(v any, opts []StashOpt) (json.RawMessage, stashOpts, error) {
	var o stashOpts
	for _, opt := range opts {
		opt(&o)
	}
	if o.attempts != nil && *o.attempts < 0 {
		return nil, o, invalidf("stash: negative attempt count %d", *o.attempts)
	}
	data, err := encodeJSON("snapshot", v)
	return data, o, err
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
