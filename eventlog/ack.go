package eventlog

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// maxAckRetries bounds how often a publish whose acknowledgement did not
// come within Config.AckTimeout is sent again: so a lost ack costs at most
// (maxAckRetries+1) x AckTimeout before the append fails.
const maxAckRetries = 3

// ErrUnconfirmed marks an append whose acknowledgement never came: it may or
// may not be stored, now or later. Append returns it when the ack timeout
// ran out, and when the caller's deadline passed after the event was sent
// (wrapping context.DeadlineExceeded). It is not a refusal: callers that
// cannot tell must treat the write as unknown (see Unknown and Settle;
// fiber leaves such a fiber for recovery).
var ErrUnconfirmed = errors.New("eventlog: no acknowledgement within the ack timeout (the event may be stored)")

// bound returns ctx bounded by Config.AckTimeout when it has no deadline of
// its own, so no wait for the server is unbounded (a batcher commits under
// context.WithoutCancel). own reports whether the bound is the Log's.
func (l *Log) bound(ctx context.Context) (bctx context.Context, cancel context.CancelFunc, own bool) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}, false
	}
	bctx, cancel = context.WithTimeout(ctx, l.cfg.AckTimeout)
	return bctx, cancel, true
}

// retryable reports whether m may be sent again after its acknowledgement
// was lost: JetStream deduplicates it on its message id, unless it carries
// an expected last sequence, which the server checks before the duplicate
// (a retry of a stored message would then conflict with itself).
func retryable(m *nats.Msg) bool {
	return m.Header.Get(jetstream.MsgIDHeader) != "" && m.Header.Get(headerExpectedLastSubSeq) == ""
}

// awaitAck waits for an async publish's acknowledgement. When none comes
// within Config.AckTimeout (jetstream's async publish timeout), a retryable
// m is published again with the same message id, up to maxAckRetries
// times; a duplicate acknowledgement of a retry is the first publish's, so
// retried reports it, and the caller must not take it for ErrDuplicate.
// gen (elections.next, taken before m was sent) ends the wait when m's
// stream elects a leader: m is then sent again if retryable, or the wait
// ends with ErrUnconfirmed wrapping ErrLeaderElected.
// Errors are jetstream's, untranslated, ErrUnconfirmed, or ctx's.
func (l *Log) awaitAck(ctx context.Context, stream string, gen context.Context, fut jetstream.PubAckFuture, m *nats.Msg) (ack *jetstream.PubAck, retried bool, err error) {
	if gen == nil {
		gen = context.Background() // no election ends the wait
	}
	for attempt := 0; ; attempt++ {
		var lost error // why the answer is taken for lost
		select {
		case ack := <-fut.Ok():
			return ack, attempt > 0, nil
		case <-gen.Done():
			// Its stream elected a leader while the answer was awaited
			// (elections.go): m may be stored.
			lost = ErrLeaderElected
		case err := <-fut.Err():
			if !errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
				return nil, attempt > 0, err
			}
			lost = err
		case <-ctx.Done():
			return nil, attempt > 0, ctx.Err()
		}
		if attempt == maxAckRetries || !retryable(m) {
			return nil, attempt > 0, fmt.Errorf("%w: %d attempts: %w", ErrUnconfirmed, attempt+1, lost)
		}
		l.resending(m, attempt, lost)
		gen = l.elections.next(stream)
		// The headers set by the first publish's options stay on m.
		if fut, err = l.js.PublishMsgAsync(m, jetstream.WithStallWait(l.cfg.AckTimeout)); err != nil {
			return nil, true, err
		}
	}
}

// resending counts and logs m, whose answer was lost (lost says why: its
// stream's election, or the ack timeout), as it is sent again with the
// same message id.
func (l *Log) resending(m *nats.Msg, attempt int, lost error) {
	l.metrics.ackRetries.Inc()
	args := []any{"subject", m.Subject, "id", m.Header.Get(jetstream.MsgIDHeader), "attempt", attempt + 1}
	if errors.Is(lost, ErrLeaderElected) {
		l.logger.Info("its stream elected a leader while the acknowledgement was awaited; publishing again with the same id", args...)
		return
	}
	l.logger.Warn("no acknowledgement within the ack timeout, publishing again with the same id", args...)
}
