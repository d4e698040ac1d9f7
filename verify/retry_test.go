package verify

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
)

// untilAnswered tries a read again while JetStream cannot answer it, and
// returns any other error, or the last one when its context ends.
func TestUntilAnswered(t *testing.T) {
	unavailable := fmt.Errorf("%w: last sequence of x: nats: API error: code=503 err_code=10008", eventlog.ErrUnavailable)
	other := errors.New("eventlog: corrupt")
	for _, tc := range []struct {
		name  string
		errs  []error // one a call; the last repeats
		calls int
		want  error
	}{
		{"answered at once", []error{nil}, 1, nil},
		{"answered after an election", []error{unavailable, unavailable, nil}, 3, nil},
		{"another error is returned", []error{unavailable, other}, 2, other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := untilAnswered(t.Context(), func() error {
				calls++
				return tc.errs[min(calls, len(tc.errs))-1]
			})
			if !errors.Is(err, tc.want) || calls != tc.calls {
				t.Fatalf("err %v after %d calls, want %v after %d", err, calls, tc.want, tc.calls)
			}
		})
	}
	t.Run("context ends", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		calls := 0
		err := untilAnswered(ctx, func() error { calls++; return unavailable })
		if !errors.Is(err, eventlog.ErrUnavailable) || calls < 2 {
			t.Fatalf("err %v after %d calls, want the unavailable one after at least 2", err, calls)
		}
	})
}
