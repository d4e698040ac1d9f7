package eventlog

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestTransient: the follower retries JetStream being slow or unavailable,
// and stops on anything else.
func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("eventlog: last sequence of x: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("wrapped: %w", nats.ErrTimeout), true},
		{nats.ErrNoResponders, true},
		{&jetstream.APIError{ErrorCode: codeClusterUnavailable}, true},
		{ErrUnavailable, true},
		{&CorruptError{What: "event", Err: errors.New("bad")}, false},
		{ErrClosed, false},
		{errors.New("disk on fire"), false},
		{&jetstream.APIError{ErrorCode: 10059}, false},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
