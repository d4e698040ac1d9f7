package fiber

import (
	"errors"
	"fmt"
)

var (
	// ErrNoFiber is returned by Stash, Step and StepJSON when the context
	// carries no fiber: the call is not made from code running inside
	// Runner.Run, Runner.Go, Runner.Resume or Runner.GoResume.
	ErrNoFiber = errors.New("fiber: not inside a fiber")

	// ErrStopped is returned by Run, Go, Resume, GoResume and Recover after
	// Runner.Close.
	ErrStopped = errors.New("fiber: runner stopped")

	// ErrFiberDone is returned by (*Fiber).Stash and Step when the fiber's
	// function has already returned.
	ErrFiberDone = errors.New("fiber: fiber already finished")

	// ErrRunning is returned by Resume and GoResume when this Runner already
	// runs the fiber.
	ErrRunning = errors.New("fiber: fiber already running")

	// ErrNameTaken is returned by Run, Go, Resume and GoResume of a fiber
	// started Unique when a live fiber of the same name runs in the agent
	// (in this Runner): one unit of work, such as a chat turn, has one
	// fiber at a time. The Runner logs it as an error too: it means a
	// caller let a second fiber of one unit of work start.
	ErrNameTaken = errors.New("fiber: a live fiber of the same name runs in this agent")

	// ErrNoSnapshot is returned by Recovered.Decode when the fiber never
	// stashed a snapshot (or stashed null).
	ErrNoSnapshot = errors.New("fiber: no snapshot")

	// ErrMaybeExecuted marks a step declared Unsafe whose operation was
	// started by an earlier run of the fiber but never recorded as completed:
	// it may or may not have taken effect. The concrete type is
	// *MaybeExecutedError; test with errors.Is.
	ErrMaybeExecuted = errors.New("fiber: operation may have executed")

	// ErrAbandoned marks an *AbandonedError, delivered to Hooks.OnError when
	// Recover gives a fiber up.
	ErrAbandoned = errors.New("fiber: fiber abandoned")
	// ErrOrphaned: a fiber ended, or its recovery began or ended, but the
	// event could not be appended (the log was unavailable), so its row
	// stays in the runs table and only a recovery (the agent's next
	// activation) finishes it. Hosts restart the agent when OnError
	// reports it.
	ErrOrphaned = errors.New("fiber: orphaned: its end could not be recorded")

	// ErrAttemptsExhausted is the cause in an *AbandonedError when the fiber
	// was found with its attempts already used up (each earlier attempt ended
	// in a crash rather than a hook error).
	ErrAttemptsExhausted = errors.New("fiber: recovery attempts exhausted")

	// ErrNoHook is the cause in an *AbandonedError when an orphan was found
	// but the Runner has no Hooks.OnFiberRecovered.
	ErrNoHook = errors.New("fiber: no OnFiberRecovered hook")

	// ErrInvalid is returned for arguments that can never work: an empty
	// fiber name or step key, a snapshot or step result that cannot be
	// encoded as JSON, a bad Config.
	ErrInvalid = errors.New("fiber: invalid input")
)

// MaybeExecutedError is returned by Step for an Unsafe step whose op.started
// was recorded by an earlier run of the fiber without an op.completed. The
// operation may have run; verify before doing it again (for example under a
// different step key). It matches ErrMaybeExecuted with errors.Is.
type MaybeExecutedError struct {
	Fiber string // fiber ID
	Key   string // step key
	OpID  string // the op ID the earlier run passed to the step function
}

func (e *MaybeExecutedError) Error() string {
	return fmt.Sprintf("fiber: operation %s (step %q of fiber %s) may have executed; verify before retrying", e.OpID, e.Key, e.Fiber)
}

// Is reports whether target is ErrMaybeExecuted.
func (e *MaybeExecutedError) Is(target error) bool { return target == ErrMaybeExecuted }

// AbandonedError is delivered to Hooks.OnError when Recover gives up on a
// fiber after Config.MaxAttempts recovery attempts and has appended
// fiber.abandoned. It matches ErrAbandoned with errors.Is and unwraps to the
// last hook error (or ErrAttemptsExhausted, ErrNoHook).
type AbandonedError struct {
	ID       string
	Name     string
	Attempts int
	Err      error
}

func (e *AbandonedError) Error() string {
	return fmt.Sprintf("fiber: abandoned fiber %s (%q) after %d recovery attempts: %v", e.ID, e.Name, e.Attempts, e.Err)
}

// Unwrap returns the cause.
func (e *AbandonedError) Unwrap() error { return e.Err }

// Is reports whether target is ErrAbandoned.
func (e *AbandonedError) Is(target error) bool { return target == ErrAbandoned }

// FailedError is delivered to Hooks.OnError when the function of a
// background fiber (Go, GoResume) returns an error. It unwraps to that error.
type FailedError struct {
	ID   string
	Name string
	Err  error
}

func (e *FailedError) Error() string {
	return fmt.Sprintf("fiber: fiber %s (%q) failed: %v", e.ID, e.Name, e.Err)
}

// Unwrap returns the fiber function's error.
func (e *FailedError) Unwrap() error { return e.Err }

// PanicError is the error a fiber ends with when its function panics. The
// panic is recovered, recorded as fiber.failed, and returned (Run, Resume) or
// delivered to Hooks.OnError (Go, GoResume) as this error; it is not
// re-raised.
type PanicError struct {
	Value any    // the value passed to panic
	Stack []byte // the stack of the panicking goroutine
}

func (e *PanicError) Error() string { return fmt.Sprintf("fiber: panic: %v", e.Value) }

// Unwrap returns Value when it is an error.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
