package eventlog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrConsumerLimit is returned by CheckFollow, and yielded by Follow, when no consumer can be
// created to follow a stream: the account's consumer limit (a tenant's
// quota) or the stream's is reached. It ends when consumers end (an
// ordered consumer the client stopped is removed after its inactivity
// threshold).
var ErrConsumerLimit = errors.New("eventlog: consumer limit reached")

// consumerLimit marks the server's "maximum consumers limit reached" as
// ErrConsumerLimit, keeping it.
func consumerLimit(err error) error {
	if errors.Is(err, jetstream.ErrMaximumConsumersLimit) {
		return fmt.Errorf("%w: %w", ErrConsumerLimit, err)
	}
	return err
}

// checkFollowTimeout bounds CheckFollow's reads: past it, the follow is
// tried.
const checkFollowTimeout = 2 * time.Second

// CheckFollow reports, before a Follow of f, whether one more consumer
// can be created on its stream: ErrConsumerLimit when the account or the
// stream already holds as many as its limit allows. Without it, a follow
// created past the limit would retry in the client library until its
// context ends, yielding nothing. A check that cannot be made (the
// account's info is not readable with these permissions) is no
// refusal: the follow is tried.
func (l *Log) CheckFollow(ctx context.Context, f Filter) error {
	_, stream, err := l.filter(f)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, checkFollowTimeout)
	defer cancel()
	if ai, err := l.js.AccountInfo(ctx); err == nil && ai.Limits.MaxConsumers > 0 && ai.Consumers >= ai.Limits.MaxConsumers {
		return fmt.Errorf("%w: the account holds %d consumers, its limit", ErrConsumerLimit, ai.Consumers)
	}
	st, err := l.js.Stream(ctx, stream)
	if err != nil {
		return nil
	}
	info := st.CachedInfo() // read just now by Stream
	if info != nil && info.Config.MaxConsumers > 0 && info.State.Consumers >= info.Config.MaxConsumers {
		return fmt.Errorf("%w: stream %s holds %d consumers, its limit", ErrConsumerLimit, stream, info.State.Consumers)
	}
	return nil
}
