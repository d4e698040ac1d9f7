package fiber

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/forever-agents/forever/eventlog"
)

// StepOpt is an option of one Step call.
type StepOpt func(*stepOpts)

type stepOpts struct {
	unsafe bool
	stash  *stepStash
	next   string // ThenStep's key
}

// stepStash is the snapshot a step records with its completion.
type stepStash struct {
	v    any
	opts []StashOpt
}

// ThenStash records v as the fiber's snapshot together with the step's
// completion: op.completed carries it (with WithAttempts, the attempt
// count too), so a step followed by a stash costs one synced write, not
// two. When Step returns nil, v is the recorded snapshot, as after Stash:
// a step answered from its recorded result stashes v on its own. When fn
// fails, nothing is stashed.
func ThenStash(v any, opts ...StashOpt) StepOpt {
	return func(o *stepOpts) { o.stash = &stepStash{v: v, opts: opts} }
}

// ThenStep records in this step's op.completed that the fiber's next Step
// with key has started: that Step writes no op.started of its own, so a
// fiber that runs steps one after another pays one synced write per step
// (the op.completed that also starts the next), not two. As with
// FirstStep, the next op counts as started from this step's completion:
// after a crash before it ran, a recovered fiber runs it again with the
// same op ID (or gets ErrMaybeExecuted for an Unsafe step), as after a
// crash between op.started and the effect. Give it only when the next step
// follows at once; a fiber that calls another key instead leaves the
// announced op started and never completed, which its end clears.
func ThenStep(key string) StepOpt { return func(o *stepOpts) { o.next = key } }

// Unsafe declares that the step's operation must not run twice and has no
// upstream idempotency key to collapse a duplicate: when an earlier run of
// the fiber started it but did not record its completion, Step returns a
// *MaybeExecutedError instead of running it again.
func Unsafe() StepOpt { return func(o *stepOpts) { o.unsafe = true } }

// Step runs fn as an idempotent step of the fiber ctx runs in, for side
// effects that cost money or are visible outside (LLM calls, tool runs,
// third-party mutations).
//
// The step's op ID is derived from the fiber ID, key and the step's
// position: the n-th call of Step with that key in this run of the fiber.
// op.started is durable before fn runs and op.completed, with fn's result,
// once it returned. When a recovered fiber (Runner.Resume) runs the same
// steps again:
//
//   - a completed op returns its recorded result without calling fn;
//   - an op started but not completed calls fn again with the same op ID,
//     which fn should pass upstream as an idempotency key; or, for a step
//     declared Unsafe, returns a *MaybeExecutedError (ErrMaybeExecuted).
//
// Positions count from the start of each run, so a resumed function that
// starts midway (from its snapshot) must give each step a key that names
// its work, such as "llm-3" for the third turn.
//
// So a step never silently runs twice: it is deduplicated by its recorded
// result, by the upstream through the op ID, or surfaced as an error.
// An error from fn is returned as it is and records nothing more: the op
// stays started, as its effect is unknown.
//
// A nil result is recorded as JSON null. Errors besides fn's: ErrNoFiber,
// ErrFiberDone, ErrInvalid (empty key, result not valid JSON), MaybeExecuted,
// a *eventlog.CorruptError for an unreadable recorded op, append errors.
func Step(ctx context.Context, key string, fn func(ctx context.Context, opID string) (json.RawMessage, error), opts ...StepOpt) (json.RawMessage, error) {
	f, ok := FromContext(ctx)
	if !ok {
		return nil, ErrNoFiber
	}
	if key == "" {
		return nil, invalidf("empty step key")
	}
	var o stepOpts
	for _, opt := range opts {
		opt(&o)
	}
	var snap json.RawMessage
	var attempts *int
	if o.stash != nil {
		data, so, err := stashData(o.stash.v, o.stash.opts)
		if err != nil {
			return nil, err
		}
		if so.next != "" {
			return nil, invalidf("step %q: AnnounceStep is a Stash option; a step announces the next with ThenStep", key)
		}
		snap, attempts = data, so.attempts
	}
	id, err := f.nextOp(key)
	if err != nil {
		return nil, err
	}
	var recorded *Op
	if f.resumed {
		op, ok, err := f.r.table.Op(f.r.cfg.Agent, f.id, id)
		if err != nil {
			return nil, fmt.Errorf("fiber: step %q of fiber %s: %w", key, f.id, err)
		}
		if ok {
			recorded = &op
		}
	}
	decision := decideStep(recorded, o.unsafe)
	ctx, span := f.startStepSpan(ctx, key, id, decision.String())
	res, err := f.step(ctx, key, id, decision, recorded, o, snap, attempts, fn)
	endSpan(span, err)
	return res, err
}

// step is Step once decided.
func (f *Fiber) step(ctx context.Context, key, id string, decision stepAction, recorded *Op, o stepOpts, snap json.RawMessage, attempts *int,
	fn func(ctx context.Context, opID string) (json.RawMessage, error)) (json.RawMessage, error) {
	switch decision {
	case stepCached:
		if o.stash != nil {
			// Answered from its record: the stash is not progress.
			if err := f.stash(ctx, snap, attempts, false, ""); err != nil {
				return nil, err
			}
		}
		if len(recorded.Result) == 0 {
			return json.RawMessage("null"), nil
		}
		return recorded.Result, nil
	case stepAmbiguous:
		return nil, &MaybeExecutedError{Fiber: f.id, Key: key, OpID: id}
	case stepRun:
		if f.takePrestarted(id) {
			break // fiber.started recorded its op.started (FirstStep)
		}
		if err := f.appendOp(ctx, EventOpStarted, payload{Fiber: f.id, OpID: id, Key: key}, false); err != nil {
			return nil, fmt.Errorf("fiber: step %q of fiber %s: %w", key, f.id, err)
		}
	case stepRerun:
		// op.started is recorded already; run again under the same op ID.
	}
	res, err := fn(ctx, id)
	if err != nil {
		return nil, err
	}
	if res == nil {
		res = json.RawMessage("null")
	}
	if !json.Valid(res) {
		return nil, invalidf("result of step %q of fiber %s is not valid JSON", key, f.id)
	}
	done := payload{Fiber: f.id, OpID: id, Result: res, Snapshot: snap, Attempts: attempts}
	if o.next != "" {
		done.NextOpID, done.NextKey = f.peekOp(o.next), o.next
	}
	// A new result recorded is progress: a recovered fiber's first one
	// resets its attempt count (attempts 0) unless ThenStash set one.
	if err := f.appendOp(ctx, EventOpCompleted, done, true); err != nil {
		return nil, fmt.Errorf("fiber: step %q of fiber %s: record result: %w", key, f.id, err)
	}
	if done.NextOpID != "" {
		f.mu.Lock()
		f.mu.prestarted = done.NextOpID
		f.mu.Unlock()
	}
	if snap != nil {
		f.mu.Lock()
		f.mu.snapshot = snap
		f.mu.Unlock()
	}
	return res, nil
}

// StepJSON is Step for a result of type T, encoded as JSON when recorded and
// decoded when replayed. A recorded result that does not decode into T is a
// *eventlog.CorruptError.
func StepJSON[T any](ctx context.Context, key string, fn func(ctx context.Context, opID string) (T, error), opts ...StepOpt) (T, error) {
	var zero T
	res, err := Step(ctx, key, func(ctx context.Context, opID string) (json.RawMessage, error) {
		v, err := fn(ctx, opID)
		if err != nil {
			return nil, err
		}
		return encodeJSON("step result", v)
	}, opts...)
	if err != nil {
		return zero, err
	}
	var out T
	if err := json.Unmarshal(res, &out); err != nil {
		return zero, &eventlog.CorruptError{What: fmt.Sprintf("result of step %q", key), Err: err}
	}
	return out, nil
}

// takePrestarted reports whether id is the op fiber.started recorded as
// started, and forgets it.
func (f *Fiber) takePrestarted(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.prestarted != id {
		return false
	}
	f.mu.prestarted = ""
	return true
}

// nextOp returns the op ID of the next Step call with key.
func (f *Fiber) nextOp(key string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.done {
		return "", ErrFiberDone
	}
	f.mu.steps[key]++
	return opID(f.id, key, f.mu.steps[key]), nil
}

// peekOp returns the op ID the next Step with key gets.
func (f *Fiber) peekOp(key string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return opID(f.id, key, f.mu.steps[key]+1)
}

// appendOp appends an op event unless the fiber has ended; progress as in
// appendLocked.
func (f *Fiber) appendOp(ctx context.Context, typ string, p payload, progress bool) error {
	f.writeMu.Lock()
	defer f.writeMu.Unlock()
	if f.isDone() {
		return ErrFiberDone
	}
	_, err := f.appendLocked(ctx, typ, p, progress)
	return err
}
