package eventlog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// JetStream error codes the log translates.
const (
	codeWrongLastSeq         = 10071
	codeWrongLastSeqR3       = 10164
	codeMsgExceedsMax        = 10054
	codeBatchDuplicate       = 10201
	headerBatchID            = jetstreamext.BatchIDHeader
	headerBatchSeq           = jetstreamext.BatchSeqHeader
	headerBatchCommit        = jetstreamext.BatchCommitHeader
	headerExpectedLastSubSeq = "Nats-Expected-Last-Subject-Sequence"
)

// AppendOpt is an option of a single Append or AppendBatch call.
type AppendOpt func(*appendOpts)

type appendOpts struct {
	expect *Seq
}

// ExpectSeq makes the append conditional: it succeeds only if the last event
// on the target subject (the agent's events, or one chat stream's chunks) has
// sequence seq. ExpectSeq(0) means "no event on the subject yet". A mismatch
// returns ErrConflict. For AppendBatch the condition applies to the first event.
func ExpectSeq(seq Seq) AppendOpt {
	return func(o *appendOpts) { o.expect = &seq }
}

// Append stores one event and returns its stream sequence once JetStream has
// acknowledged it (under sync always, once it is on disk).
//
// Empty e.ID and e.Time are filled in; e.ID is the message id JetStream
// deduplicates on, so an append retried with the same ID stores nothing new
// and returns the original's sequence with ErrDuplicate.
//
// Errors: ErrInvalid (bad agent, stream or type), ErrTooLarge, ErrConflict
// (with ExpectSeq), ErrDuplicate, ErrClosed, or a transport error.
func (l *Log) Append(ctx context.Context, e Event, opts ...AppendOpt) (Seq, error) {
	var o appendOpts
	for _, opt := range opts {
		opt(&o)
	}
	m, stream, err := l.message(&e)
	if err != nil {
		return 0, err
	}
	switch {
	case l.cfg.Owner == nil:
		return l.publish(ctx, m, stream, o.expect, &e)
	case e.Stream != "":
		return l.appendChunks(ctx, stream, []*Event{&e}, []*nats.Msg{m})
	}
	return l.fenced(ctx, e.Agent, m, o.expect, func(expect *Seq) (Seq, error) {
		return l.publish(ctx, m, stream, expect, &e)
	})
}

// publishOne publishes m and waits for its acknowledgement. mode labels the
// latency metric; e names the event in errors, nil for a batch of one.
//
// Under a ctx without deadline each wait is bounded by Config.AckTimeout,
// and a lost acknowledgement is retried with the same message id (see
// awaitAck); a duplicate acknowledgement of a retry is the first publish's.
func (l *Log) publishOne(ctx context.Context, m *nats.Msg, stream, mode string, expect *Seq, e *Event) (Seq, error) {
	start := time.Now()
	var ack *jetstream.PubAck
	var err error
	opts := expectOpts(expect)
	retried := false
	if err := ctx.Err(); err != nil {
		return 0, notSent(err)
	}
	for attempt := 0; ; attempt++ {
		bctx, cancel, own := l.bound(ctx)
		ectx, stop := untilElected(bctx, l.elections.next(stream))
		ack, err = l.js.PublishMsg(ectx, m, opts...)
		elected := err != nil && leaderElected(ectx)
		stop()
		cancel()
		if elected {
			// Its stream elected a leader while the answer was awaited
			// (elections.go): the answer is lost, the message may be
			// stored.
			if attempt == maxAckRetries || !retryable(m) {
				err = fmt.Errorf("%w: %w", ErrUnconfirmed, ErrLeaderElected)
				break
			}
			l.resending(m, attempt, ErrLeaderElected)
			opts, retried = nil, true
			continue
		}
		if err != nil && !own && unanswered(err) {
			// Sent, and the caller's deadline came first (a stream
			// electing its leader answers late): it may still be stored.
			err = fmt.Errorf("%w: %w", ErrUnconfirmed, err)
			break
		}
		if err == nil || !own || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if attempt == maxAckRetries || !retryable(m) {
			err = fmt.Errorf("%w: %d attempts: %w", ErrUnconfirmed, attempt+1, err)
			break
		}
		l.resending(m, attempt, err)
		// The expected sequence, if any, is a header of m now.
		opts, retried = nil, true
	}
	if err != nil {
		return 0, l.translate(err, e)
	}
	l.metrics.observeAppend(stream, mode, 1, time.Since(start))
	if ack.Duplicate && !retried {
		what := "batch"
		if e != nil {
			what = fmt.Sprintf("id %q", e.ID)
		}
		return l.seqOf(stream, ack.Sequence), fmt.Errorf("%w: %s already stored at seq %d", ErrDuplicate, what, l.seqOf(stream, ack.Sequence))
	}
	return l.seqOf(stream, ack.Sequence), nil
}

// expectOpts is the publish option of an expected last subject sequence.
func expectOpts(expect *Seq) []jetstream.PublishOpt {
	if expect == nil {
		return nil
	}
	return []jetstream.PublishOpt{jetstream.WithExpectLastSequencePerSubject(rawSeq(*expect))}
}

// AppendBatch stores evs, in order, as JetStream atomic batches of at most
// Config.MaxBatch events: each batch is stored whole or not at all and costs
// one acknowledgement and one fsync. It returns the sequence of the last event
// once every batch is acknowledged. All events must go to the same JetStream
// stream (all chunks, or all lifecycle events).
//
// If a batch contains an id already stored (a retried batch), that batch is
// not stored again and AppendBatch returns ErrDuplicate. A failure part way
// leaves the earlier batches stored; events of one batch never split.
func (l *Log) AppendBatch(ctx context.Context, evs []Event, opts ...AppendOpt) (Seq, error) {
	if len(evs) == 0 {
		return 0, invalidf("empty batch")
	}
	var o appendOpts
	for _, opt := range opts {
		opt(&o)
	}
	msgs := make([]*nats.Msg, len(evs))
	var stream string
	for i := range evs {
		m, s, err := l.message(&evs[i])
		if err != nil {
			return 0, fmt.Errorf("batch event %d: %w", i, err)
		}
		if i > 0 && s != stream {
			return 0, invalidf("batch mixes streams %s and %s", stream, s)
		}
		msgs[i], stream = m, s
	}
	commit := func(expect *Seq) (Seq, error) {
		var last Seq
		for off := 0; off < len(msgs); off += l.cfg.MaxBatch {
			part := msgs[off:min(off+l.cfg.MaxBatch, len(msgs))]
			seq, err := l.commitBatch(ctx, stream, part, expect)
			if err != nil {
				return last, err
			}
			last, expect = seq, nil
		}
		return last, nil
	}
	if l.cfg.Owner == nil {
		return commit(o.expect)
	}
	if evs[0].Stream != "" {
		ptrs := make([]*Event, len(evs))
		for i := range evs {
			ptrs[i] = &evs[i]
		}
		return l.appendChunks(ctx, stream, ptrs, msgs)
	}
	for i := range evs {
		if evs[i].Agent != evs[0].Agent {
			return 0, invalidf("fenced batch mixes agents %q and %q", evs[0].Agent, evs[i].Agent)
		}
	}
	return l.fenced(ctx, evs[0].Agent, msgs[0], o.expect, func(expect *Seq) (Seq, error) {
		for _, m := range msgs[1:] {
			stampLike(m, msgs[0])
		}
		return commit(expect)
	})
}

// appendChunks stores chunks under their agents' fences, in atomic batches
// of at most MaxBatch (a caller's ExpectSeq does not apply: each stream is
// fenced on its own).
func (l *Log) appendChunks(ctx context.Context, stream string, evs []*Event, msgs []*nats.Msg) (Seq, error) {
	for i, e := range evs {
		if err := l.prepareChunks(ctx, e.Agent, e.Stream, msgs[i]); err != nil {
			return 0, err
		}
	}
	var last Seq
	for off := 0; off < len(msgs); off += l.cfg.MaxBatch {
		end := min(off+l.cfg.MaxBatch, len(msgs))
		errs := make([]error, end-off)
		fs := l.fenceChunks(evs[off:end], msgs[off:end], errs)
		if err := errors.Join(errs...); err != nil {
			return last, err
		}
		seq, err := l.commitBatch(ctx, stream, msgs[off:end], nil)
		if errors.Is(err, ErrConflict) {
			stale, _, serr := l.staleChunks(ctx, fs)
			for _, e := range stale {
				return last, e
			}
			if serr != nil {
				return last, unreadableRefusal(err, serr)
			}
			// Every stream is where this writer left it, or its last
			// chunk is this writer's own (a lost ack): nothing of this
			// batch was stored, and the fences now say where to go on.
			return last, fmt.Errorf("%w: %v", errRefused, err) // not ErrConflict: nobody else wrote
		}
		if err != nil {
			forgetChunks(fs)
			return last, err
		}
		n := Seq(end - off)
		advanceChunks(fs, func(i int) Seq { return seq - (n - 1 - Seq(i)) })
		last = seq
	}
	return last, nil
}

// A batch commit that no server answered (nats.ErrNoResponders: a stream
// between leaders) is sent again after noResponderWait, doubling, while
// the wait is at most noResponderMaxWait (about 1.5 s in all).
const (
	noResponderWait    = 50 * time.Millisecond
	noResponderMaxWait = 800 * time.Millisecond
)

// sleepCtx waits d, or until ctx is done: it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// commitBatch sends one atomic batch (jetstreamext.PublishMsgBatch).
func (l *Log) commitBatch(ctx context.Context, stream string, msgs []*nats.Msg, expect *Seq) (Seq, error) {
	if len(msgs) == 1 {
		// A batch of one is a plain publish: same guarantees, less work.
		// (Its message may carry batch headers from a larger batch sent
		// before.)
		msgs[0].Header.Del(headerBatchID)
		msgs[0].Header.Del(headerBatchSeq)
		msgs[0].Header.Del(headerBatchCommit)
		return l.publishOne(ctx, msgs[0], stream, "batch", expect, nil)
	}
	start := time.Now()
	if l.asyncBatches() {
		return l.publishAsync(ctx, stream, msgs, expect, start)
	}
	if expect != nil {
		msgs[0].Header.Set(headerExpectedLastSubSeq, seqString(*expect))
	}
	// Synadia's atomic batch publish: every message but the last without
	// a reply, the last a request with Nats-Batch-Commit; no ack awaited
	// before the commit (AckFirst off), which is what a batch of a few
	// events wants. It checks the commit's answer names this batch and
	// its size. Not retried when the answer is lost: the batch id is new
	// per send and a batch holding a stored id is refused whole.
	var ack *jetstreamext.BatchAck
	var err error
	for wait := noResponderWait; ; wait *= 2 {
		bctx, cancel, _ := l.bound(ctx)
		ectx, stop := untilElected(bctx, l.elections.next(stream))
		ack, err = jetstreamext.PublishMsgBatch(ectx, l.js, msgs, jetstreamext.BatchFlowControl{})
		elected := err != nil && leaderElected(ectx)
		stop()
		cancel()
		if elected {
			// Sent, and its stream elected a leader while the answer was
			// awaited (elections.go): the batch may be stored.
			return 0, fmt.Errorf("%w: batch commit: %w", ErrUnconfirmed, ErrLeaderElected)
		}
		// No server took the commit: nothing of the batch is stored
		// (its id is new per send), and a stream whose leader steps
		// down (the leaders' spread, a node leaving) answers again
		// within moments: wait and send it again, as nats.go's
		// PublishMsg does for a plain publish.
		if !errors.Is(err, nats.ErrNoResponders) || wait > noResponderMaxWait || !sleepCtx(ctx, wait) {
			break
		}
	}
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return 0, fmt.Errorf("%w: batch commit: no stream answers (is JetStream up?): %w", ErrUnavailable, err)
		}
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) {
			return 0, l.translate(apiErr, nil)
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			// Sent, and no answer came (a stream leader changing): the
			// batch may be stored.
			return 0, fmt.Errorf("%w: batch commit: %w", ErrUnconfirmed, err)
		}
		return 0, fmt.Errorf("eventlog: batch commit: %w", err)
	}
	l.metrics.observeAppend(stream, "batch", len(msgs), time.Since(start))
	return l.seqOf(stream, ack.Sequence), nil
}

// publishAsync publishes msgs without waiting in between, then waits for
// every acknowledgement; see Config.AsyncBatches.
func (l *Log) publishAsync(ctx context.Context, stream string, msgs []*nats.Msg, expect *Seq, start time.Time) (Seq, error) {
	gen := l.elections.next(stream)
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for i, m := range msgs {
		var popts []jetstream.PublishOpt
		if i == 0 {
			popts = expectOpts(expect)
		}
		f, err := l.js.PublishMsgAsync(m, popts...)
		if err != nil {
			return 0, l.translate(err, nil)
		}
		futures = append(futures, f)
	}
	var last Seq
	var firstErr error
	dups := 0
	for i, f := range futures {
		ack, retried, err := l.awaitAck(ctx, stream, gen, f, msgs[i])
		switch {
		case err != nil && ctx.Err() != nil:
			return 0, ctx.Err()
		case err != nil:
			if firstErr == nil {
				firstErr = l.translate(err, nil)
			}
		default:
			last = l.seqOf(stream, ack.Sequence)
			if ack.Duplicate && !retried {
				dups++
			}
		}
	}
	if firstErr != nil {
		return 0, firstErr
	}
	l.metrics.observeAppend(stream, "batch", len(msgs), time.Since(start))
	if dups == len(msgs) {
		return last, fmt.Errorf("%w: batch already stored, last at seq %d", ErrDuplicate, last)
	}
	return last, nil
}

// message validates e, fills in defaults and encodes it.
func (l *Log) message(e *Event) (*nats.Msg, string, error) {
	if l.closed() {
		return nil, "", ErrClosed
	}
	if err := e.validate(); err != nil {
		return nil, "", err
	}
	if e.ID == "" {
		e.ID = nuid.Next()
	}
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	body, err := e.encode()
	if err != nil {
		return nil, "", err
	}
	subject, stream := l.subject(e)
	m := nats.NewMsg(subject)
	m.Data = body
	m.Header[HeaderType] = []string{e.Type}
	m.Header[jetstream.MsgIDHeader] = []string{e.ID}
	if err := l.fits(e, subject, body); err != nil {
		return nil, "", err
	}
	return m, stream, nil
}

// fits returns ErrTooLarge unless e's message body on subject fits the
// server's max payload. Headers and subject travel in the same protocol
// frame; it leaves room for the batch headers too.
func (l *Log) fits(e *Event, subject string, body []byte) error {
	return l.fitsSize(e, subject, len(body))
}

// fitsSize is fits for a body of n bytes.
func (l *Log) fitsSize(e *Event, subject string, n int) error {
	if size, limit := n+len(subject)+256, l.nc.MaxPayload(); int64(size) > limit {
		return fmt.Errorf("%w: %s event of %d bytes for agent %q, server max payload is %d bytes", ErrTooLarge, e.Type, n, e.Agent, limit)
	}
	return nil
}

// translate maps JetStream errors to the package's sentinels, keeping the
// cause.
func (l *Log) translate(err error, e *Event) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case codeWrongLastSeq, codeWrongLastSeqR3:
			return fmt.Errorf("%w: %w", ErrConflict, err)
		case codeMsgExceedsMax:
			return fmt.Errorf("%w: %w", ErrTooLarge, err)
		case codeBatchDuplicate:
			return fmt.Errorf("%w: %w", ErrDuplicate, err)
		}
		if storageFull(apiErr) {
			l.fullAt.Store(time.Now().UnixNano())
			return fmt.Errorf("%w: %w", ErrStorageFull, err)
		}
	}
	if errors.Is(err, nats.ErrMaxPayload) {
		return fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("%w: append: no stream answers (is JetStream up?): %w", ErrUnavailable, err)
	}
	if Unavailable(err) {
		return fmt.Errorf("%w: append: %w", ErrUnavailable, err)
	}
	if e != nil {
		return fmt.Errorf("eventlog: append %s for %q: %w", e.Type, e.Agent, err)
	}
	return fmt.Errorf("eventlog: append: %w", err)
}
