package waitfor

import (
	"testing"
	"time"
)

// Bound is how long True and NoError wait before failing the test.
const Bound = 30 * time.Second

// A condition is checked again after first, then after each wait grown by
// half, up to most: a condition that holds soon is seen soon, and one that
// takes seconds (often a JetStream API call each time) is not asked a
// hundred times a second on a loaded machine.
const (
	first = 10 * time.Millisecond
	most  = 100 * time.Millisecond
)

// True waits until cond returns true, or fails the test after Bound with
// what, a description of the condition.
func True(t testing.TB, what string, cond func() bool) {
	t.Helper()
	trueWithin(t, Bound, what, cond)
}

func trueWithin(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	Within(t, d, func() error {
		if cond() {
			return nil
		}
		return errString(what)
	})
}

// NoError waits until f returns nil, or fails the test after Bound with the
// last error f returned: let f describe what it saw.
func NoError(t testing.TB, f func() error) {
	t.Helper()
	Within(t, Bound, f)
}

// Within is NoError with a bound of d instead of Bound.
func Within(t testing.TB, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for wait := first; ; wait = min(wait*3/2, most) {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v in vain: %v", d, err)
			return
		}
		time.Sleep(wait) // the poll's interval, the one sleep of the waits
	}
}

type errString string

func (e errString) Error() string { return string(e) }
