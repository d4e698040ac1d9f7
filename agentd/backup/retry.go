package backup

import (
	"context"
	"errors"
	"time"

	"github.com/forever-agents/forever/internal/backoff"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// apiPatience bounds how long a restore retries one JetStream API call
// that failed transiently.
const apiPatience = time.Minute

// errCodeUnavailable is JetStream's "temporarily unavailable" (10008):
// the stream's group has no leader yet.
const errCodeUnavailable jetstream.ErrorCode = 10008

// retryAPI runs call until it succeeds, fails for good, or apiPatience
// passes. A cluster that just started, or that is creating a replicated
// stream a restore deleted (a running agentd heals a deleted stream),
// answers a stream request late or with "temporarily unavailable" for a
// few seconds; that is no reason to stop a restore halfway.
func retryAPI(ctx context.Context, call func() error) error {
	deadline := time.Now().Add(apiPatience)
	for try := 1; ; try++ {
		err := call()
		if err == nil || !transient(ctx, err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff.Exp(250*time.Millisecond, 5*time.Second, try)):
		}
	}
}

// transient reports whether err is a JetStream API call's timeout or a
// cluster's "try again", rather than an answer, while ctx is still alive.
func transient(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders):
		return true
	case errors.As(err, &apiErr):
		return apiErr.Code == 503 || apiErr.ErrorCode == errCodeUnavailable
	}
	return false
}
