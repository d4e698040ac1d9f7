package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestExp(t *testing.T) {
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i, w := range want {
		if got := Exp(time.Second, 5*time.Second, i+1); got != w {
			t.Errorf("Exp(n=%d) = %v, want %v", i+1, got, w)
		}
	}
}

// TestRetry: a call is made again while again takes its error, and not
// after nil, another error, or its context's end.
func TestRetry(t *testing.T) {
	busy, bad := errors.New("busy"), errors.New("bad")
	again := func(err error) bool { return errors.Is(err, busy) }
	for _, c := range []struct {
		errs  []error // one a call; the last repeats
		calls int
		want  error
	}{
		{[]error{nil}, 1, nil},
		{[]error{busy, busy, nil}, 3, nil},
		{[]error{busy, bad}, 2, bad},
	} {
		calls := 0
		err := Retry(t.Context(), time.Millisecond, time.Millisecond, again, func() error {
			calls++
			return c.errs[min(calls, len(c.errs))-1]
		})
		if !errors.Is(err, c.want) || calls != c.calls {
			t.Errorf("errs %v: %v after %d calls, want %v after %d", c.errs, err, calls, c.want, c.calls)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	calls := 0
	err := Retry(ctx, time.Millisecond, time.Millisecond, again, func() error {
		if calls++; calls == 2 {
			cancel()
		}
		return busy
	})
	if !errors.Is(err, busy) || calls != 2 {
		t.Errorf("context ended: %v after %d calls, want busy after 2", err, calls)
	}
}
