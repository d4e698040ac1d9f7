package backup

import (
	"context"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/backoff"
)

// apiPatience bounds how long a restore retries one JetStream API call
// that failed transiently.
const apiPatience = time.Minute

// retryAPI runs call until it succeeds, fails for good, or apiPatience
// passes. A cluster that just started, or that is creating a replicated
// stream a restore deleted (a running agentd heals a deleted stream),
// answers a stream request late or with "temporarily unavailable" for a
// few seconds; that is no reason to stop a restore halfway.
func retryAPI(ctx context.Context, call func() error) error {
	deadline := time.Now().Add(apiPatience)
	return backoff.Retry(ctx, 250*time.Millisecond, 5*time.Second, func(err error) bool {
		return transient(ctx, err) && !time.Now().After(deadline)
	}, call)
}

// transient reports whether err is JetStream being slow or electing
// (eventlog.Transient) while ctx is still alive.
func transient(ctx context.Context, err error) bool {
	return ctx.Err() == nil && eventlog.Transient(err)
}
