package backup

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestTransient: a restore retries an API call's timeout and a cluster's
// "temporarily unavailable", and nothing else, and never once its own
// context ended.
func TestTransient(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(live)
	cancel()
	for _, c := range []struct {
		ctx  context.Context
		err  error
		want bool
	}{
		{live, context.DeadlineExceeded, true},
		{live, fmt.Errorf("stream info: %w", nats.ErrTimeout), true},
		{live, &jetstream.APIError{Code: 503, ErrorCode: 10008}, true},
		{live, &jetstream.APIError{Code: 404, ErrorCode: jetstream.JSErrCodeStreamNotFound}, false},
		{live, errors.New("insufficient resources"), false},
		{done, context.DeadlineExceeded, false},
	} {
		if got := transient(c.ctx, c.err); got != c.want {
			t.Errorf("transient(ctx alive %v, %v) = %v, want %v", c.ctx.Err() == nil, c.err, got, c.want)
		}
	}
}
