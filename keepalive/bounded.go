package keepalive

import (
	"context"
	"fmt"
	"time"
)

// callWithin runs fn for at most d on clock and returns its error. When the
// bound is reached first, fn's ctx is cancelled with an ErrHung error (made
// by hung), the call is abandoned (it keeps running in its own goroutine
// until it returns; its result is dropped) and that error is returned with
// abandoned set.
func callWithin(ctx context.Context, clock Clock, d time.Duration, fn func(context.Context) error,
	hung func() string) (abandoned bool, err error) {
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The timer exists before the call starts, so a test's fake clock can
	// move past the bound as soon as it sees the call run.
	t := clock.NewTimer(d)
	defer t.Stop()
	res := make(chan error, 1) // buffered: an abandoned call never blocks
	go func() { res <- fn(cctx) }()
	select {
	case err := <-res:
		return false, err
	case <-t.C():
	}
	select {
	case err := <-res: // returned just as the bound was reached
		return false, err
	default:
	}
	err = fmt.Errorf("%s: %w", hung(), ErrHung)
	cancel(err)
	return true, err
}
