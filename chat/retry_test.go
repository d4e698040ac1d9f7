package chat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestRetryRead: a recovery's reads are retried while JetStream is slow or
// electing, and only then.
func TestRetryRead(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	calls := 0
	err := retryRead(t.Context(), logger, "x", func() error {
		calls++
		if calls < 3 {
			return fmt.Errorf("eventlog: follow: %w", context.DeadlineExceeded)
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("transient errors: err %v after %d calls", err, calls)
	}
	calls = 0
	bad := errors.New("corrupt")
	if err := retryRead(t.Context(), logger, "x", func() error { calls++; return bad }); err != bad || calls != 1 {
		t.Fatalf("other error: %v after %d calls", err, calls)
	}
	ctx, cancel := context.WithCancel(t.Context())
	calls = 0
	err = retryRead(ctx, logger, "x", func() error { calls++; cancel(); return nats.ErrNoResponders })
	if !errors.Is(err, nats.ErrNoResponders) || calls != 1 {
		t.Fatalf("cancelled: %v after %d calls", err, calls)
	}
}
