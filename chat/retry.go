package chat

import (
	"context"
	"log/slog"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/backoff"
)

// readRetryFor bounds how long a recovery retries reads that JetStream does
// not answer in time (a stream electing its leader after its node died).
const readRetryFor = 30 * time.Second

// retryRead runs fn, a read that writes nothing, again while it fails with
// a transient error (eventlog.Transient), for at most readRetryFor: a turn
// recovered while its stream elects a leader then goes on instead of
// failing. Other errors, and ctx ending, return at once.
func retryRead(ctx context.Context, logger *slog.Logger, what string, fn func() error) error {
	deadline := time.Now().Add(readRetryFor)
	for n := 0; ; n++ {
		err := fn()
		if err == nil || ctx.Err() != nil || !eventlog.Transient(err) || time.Now().After(deadline) {
			return err
		}
		wait := backoff.Exp(100*time.Millisecond, 2*time.Second, n)
		logger.Warn("read failed; retrying", "what", what, "err", err, "in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}
