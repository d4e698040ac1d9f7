package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// rawAsync publishes raw async baselines: up to asyncWindow acknowledgements
// pending, counting the publishes that fail.
type rawAsync struct {
	js     jetstream.JetStream
	failed atomic.Int64
}

func newRawAsync(env *Env) (*rawAsync, error) {
	r := &rawAsync{}
	js, err := jetstream.New(env.Conn,
		jetstream.WithPublishAsyncMaxPending(asyncWindow),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { r.failed.Add(1) }),
	)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	r.js = js
	return r, nil
}

// publish sends k messages made by msg, then waits until every one is
// acknowledged; a failed publish is an error.
func (r *rawAsync) publish(ctx context.Context, k int, msg func() *nats.Msg) error {
	for range k {
		// Under sync always a full window takes longer to drain than the
		// default stall wait of 200ms.
		if _, err := r.js.PublishMsgAsync(msg(), jetstream.WithStallWait(time.Minute)); err != nil {
			return err
		}
	}
	select {
	case <-r.js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	}
	if f := r.failed.Swap(0); f > 0 {
		return fmt.Errorf("%d async publishes failed", f)
	}
	return nil
}
