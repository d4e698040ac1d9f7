package keepalive

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrInvalid is returned by Scheduler.Schedule and Scheduler.Cancel for
	// input that can never be scheduled: an agent or schedule id that is not a
	// valid subject token, no callback, a payload that is not JSON, a spec with
	// no kind or more than one, a negative delay, a non-positive interval, a
	// cron expression that does not parse. Also returned by the configs'
	// Validate methods.
	ErrInvalid = errors.New("keepalive: invalid input")

	// ErrStopped is returned by Scheduler.Schedule and Scheduler.Cancel when
	// Scheduler.Run has returned (or returns while they wait), and by Run when
	// called a second time.
	ErrStopped = errors.New("keepalive: scheduler stopped")

	// ErrLeaseLost marks a heartbeat that found the agent's ownership lease
	// held by someone else. Test with errors.Is; the concrete type is
	// *LeaseLostError.
	ErrLeaseLost = errors.New("keepalive: lease lost")

	// ErrExhausted marks the *FireError handed to SchedulerConfig.OnError when
	// a schedule's callback failed MaxAttempts times in a row and the
	// occurrence was given up (a schedule.failed event was appended).
	ErrExhausted = errors.New("keepalive: schedule callback failed too many times")

	// ErrHung marks a call that did not return within its bound: a schedule
	// callback running longer than SchedulerConfig.CallbackTimeout (the
	// *FireError handed to SchedulerConfig.OnError wraps it, and its text is
	// the attempt's recorded error), or a heartbeat running longer than
	// PoolConfig.HeartbeatTimeout (handed to PoolConfig.OnHeartbeatError and
	// returned by Pool.Err). The call's ctx was cancelled and its eventual
	// result is ignored.
	ErrHung = errors.New("keepalive: call did not return in time")
)

// LeaseLostError is what a Heartbeat returns when the lease it renews is held
// by another owner. It matches ErrLeaseLost with errors.Is. The keepalive
// package does not create leases itself; the cluster runtime's Heartbeat func
// returns this error and Pool surfaces it through Keeper.Err and
// PoolConfig.OnHeartbeatError.
type LeaseLostError struct {
	Owner     string    // the current holder of the lease, if known
	ExpiresAt time.Time // when the holder's lease expires, if known
	Err       error     // the underlying cause, if any
}

func (e *LeaseLostError) Error() string {
	s := fmt.Sprintf("keepalive: lease lost to %q (expires %s)", e.Owner, e.ExpiresAt.Format(time.RFC3339))
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying cause.
func (e *LeaseLostError) Unwrap() error { return e.Err }

// Is reports whether target is ErrLeaseLost.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// FireError is a failed attempt of a schedule's callback, as handed to
// SchedulerConfig.OnError. Final is true when this attempt was the last one
// (the error then matches ErrExhausted).
type FireError struct {
	Agent, ID, Callback string
	Attempts            int  // attempts made for this occurrence, this one included
	Final               bool // no retry follows: schedule.failed was appended
	Err                 error
}

func (e *FireError) Error() string {
	s := "keepalive: schedule %s of %q: callback %q failed (attempt %d): %v"
	if e.Final {
		s = "keepalive: schedule %s of %q: callback %q failed, giving up after %d attempts: %v"
	}
	return fmt.Sprintf(s, e.ID, e.Agent, e.Callback, e.Attempts, e.Err)
}

// Unwrap returns the callback's error.
func (e *FireError) Unwrap() error { return e.Err }

// Is reports whether target is ErrExhausted and this was the final attempt.
func (e *FireError) Is(target error) bool { return e.Final && target == ErrExhausted }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
