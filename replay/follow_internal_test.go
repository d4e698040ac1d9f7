package replay

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/forever-agents/forever/blob"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
)

// TestTransientFollow: a gateway's follow is followed again after an
// error that may pass (a timeout, JetStream unavailable), never after one
// for good or a chunk that cannot be read.
func TestTransientFollow(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("eventlog: follow x: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("x: %w", eventlog.ErrUnavailable), true},
		{fmt.Errorf("x: %w", ErrUnknownStream), false},
		{fmt.Errorf("x: %w", chunk.ErrExpired), false},
		{fmt.Errorf("x: %w", eventlog.ErrConsumerLimit), false},
		{&eventlog.CorruptError{What: "chunk", Err: errors.New("bad")}, false},
		{fmt.Errorf("x: %w", blob.ErrNotFound), false},
	} {
		if got := transientFollow(c.err); got != c.want {
			t.Errorf("transientFollow(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
