// Package backoff computes the exponential waits between retries that
// fiber recovery hooks and keepalive schedule callbacks share, and runs
// a call again on them while its error says to (Retry).
package backoff

import (
	"context"
	"time"
)

// Exp is the wait before retry n (n >= 1): base doubled n-1 times, at most
// max.
func Exp(base, max time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// Retry calls call until it returns nil or an error again does not take,
// or ctx ends, waiting Exp(base, max, n) before the n-th call again; it
// returns call's last error.
func Retry(ctx context.Context, base, max time.Duration, again func(error) bool, call func() error) error {
	for try := 1; ; try++ {
		err := call()
		if err == nil || !again(err) {
			return err
		}
		t := time.NewTimer(Exp(base, max, try))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}
