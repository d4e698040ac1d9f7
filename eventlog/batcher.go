package eventlog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of BatcherConfig.
const (
	DefaultBatchCount = 256
	DefaultBatchDelay = 50 * time.Microsecond
)

// BatcherConfig configures NewBatcher. Zero fields take the defaults.
type BatcherConfig struct {
	// MaxCount flushes a batch once it holds this many events (capped at
	// Config.MaxBatch). Default 256.
	MaxCount int
	// MaxDelay flushes a batch this long after its first event arrived.
	// Default 50us: events arriving while a batch commits already fill the
	// next one, so a long wait only adds latency (measured with
	// go run ./bench -run chat-chunks: 2ms gave p99 45ms at 100 streams x
	// 100 chunks/s under sync always, 50us gives 17ms, both over 10k/s).
	MaxDelay time.Duration
}

// ErrStopped is returned by Batcher.Add once the Batcher's Run has
// returned, and (wrapped) by Projector.WaitFor once the Projector's Run has
// returned because its ctx ended.
var ErrStopped = errors.New("eventlog: stopped")

// Batcher group-commits events from many writers: it collects events into
// JetStream atomic batches, flushed by count or after MaxDelay, one batch in
// flight; while it commits the next one fills, so the batch size adapts to
// the load. (Several batches in flight measured worse: the stream commits
// them one at a time anyway, and smaller batches cost more fsyncs.) Events
// added by one goroutine are stored in the order added. All events of a Batcher must go to the same JetStream stream
// (chunks, or lifecycle events).
//
// With Config.AsyncBatches (no fsync per write to share) Add publishes at
// once, pipelined, and Run only collects the acknowledgements.
//
// An event is durable once its Pending's Wait returns nil. Use it for
// high-rate writes such as chat chunks, where a fsync per event is too slow.
type Batcher struct {
	l   *Log
	cfg BatcherConfig
	in  chan *Pending
	// async (Config.AsyncBatches): Add publishes at once and Run collects
	// the acknowledgements in order; there is no fsync to share.
	async bool

	mu struct {
		sync.Mutex
		stopped bool
		adders  int           // Adds between the stopped check and their send
		quiet   chan struct{} // closed once stopped and adders == 0
	}
}

// Pending is an event added to a Batcher, not yet known to be stored.
type Pending struct {
	e      Event
	msg    *nats.Msg // built and checked once, by Add
	stream string
	fut    jetstream.PubAckFuture // async mode
	ready  chan struct{}
	seq    Seq
	err    error
}

// Wait blocks until the event's batch is acknowledged, and returns its
// sequence or the batch's error.
func (p *Pending) Wait(ctx context.Context) (Seq, error) {
	select {
	case <-p.ready:
		return p.seq, p.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Done is closed when the event's batch is acknowledged or failed.
func (p *Pending) Done() <-chan struct{} { return p.ready }

// NewBatcher returns a Batcher; call Run to start it.
func (l *Log) NewBatcher(cfg BatcherConfig) *Batcher {
	if cfg.MaxCount <= 0 {
		cfg.MaxCount = DefaultBatchCount
	}
	cfg.MaxCount = min(cfg.MaxCount, l.cfg.MaxBatch)
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = DefaultBatchDelay
	}
	b := &Batcher{l: l, cfg: cfg, in: make(chan *Pending, cfg.MaxCount), async: l.asyncBatches()}
	b.mu.quiet = make(chan struct{})
	return b
}

// Add validates e and queues it. Bad input (ErrInvalid, ErrTooLarge) is
// returned at once and queues nothing. The returned Pending reports when the
// event is stored.
func (b *Batcher) Add(ctx context.Context, e Event) (*Pending, error) {
	m, stream, err := b.l.message(&e)
	if err != nil {
		return nil, err
	}
	if b.l.cfg.Owner != nil {
		if e.Stream == "" {
			return nil, invalidf("a fenced Batcher carries chunks only; append %s events with Append", e.Type)
		}
		if err := b.l.prepareChunks(ctx, e.Agent, e.Stream, m); err != nil {
			return nil, err
		}
	}
	p := &Pending{e: e, msg: m, stream: stream, ready: make(chan struct{})}
	b.mu.Lock()
	if b.mu.stopped {
		b.mu.Unlock()
		return nil, ErrStopped
	}
	b.mu.adders++
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.mu.adders--
		if b.mu.stopped && b.mu.adders == 0 {
			close(b.mu.quiet)
		}
		b.mu.Unlock()
	}()
	if b.async {
		// Published in Add's order on one connection, so stored in order.
		p.fut, err = b.l.js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute))
		if err != nil {
			return nil, b.l.translate(err, &e)
		}
	}
	// Run keeps receiving until every Add in flight has sent.
	select {
	case b.in <- p:
		return p, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// stop refuses new Adds and returns a channel closed once no Add is between
// its check and its send.
func (b *Batcher) stop() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.mu.stopped {
		b.mu.stopped = true
		if b.mu.adders == 0 {
			close(b.mu.quiet)
		}
	}
	return b.mu.quiet
}

// Run commits batches until ctx is done. Events still queued then are
// committed under a context without cancel before Run returns, so an event
// whose Add succeeded is either stored or its Wait returns an error.
func (b *Batcher) Run(ctx context.Context) error {
	if b.async {
		return b.collect(ctx)
	}
	in := b.in
	defer func() {
		rest := b.remaining()
		for len(rest) > 0 {
			n := min(len(rest), b.cfg.MaxCount)
			b.commit(context.WithoutCancel(ctx), rest[:n])
			rest = rest[n:]
		}
	}()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var group []*Pending
		select {
		case <-ctx.Done():
			return nil
		case p := <-in:
			group = append(group, p)
		}
		timer.Reset(b.cfg.MaxDelay)
	fill:
		for len(group) < b.cfg.MaxCount {
			select {
			case p := <-in:
				group = append(group, p)
			case <-timer.C:
				break fill
			case <-ctx.Done():
				break fill
			}
		}
		timer.Stop()
		b.commit(context.WithoutCancel(ctx), group)
	}
}

// remaining stops Add and returns what is still queued, once no Add is in
// progress: every event whose Add succeeded and that Run has not taken.
func (b *Batcher) remaining() []*Pending {
	quiet := b.stop()
	var rest []*Pending
	for {
		select {
		case p := <-b.in:
			rest = append(rest, p)
			continue
		case <-quiet:
		}
		break
	}
	return drain(b.in, rest)
}

// collect resolves async publishes as their acknowledgements arrive.
func (b *Batcher) collect(ctx context.Context) error {
	for {
		select {
		case p := <-b.in:
			b.await(ctx, p)
		case <-ctx.Done():
			for _, p := range b.remaining() {
				b.await(ctx, p)
			}
			return nil
		}
	}
}

// await resolves p once its acknowledgement came, or after its retries
// with the same message id ran out (see Log.awaitAck): bounded by about
// (maxAckRetries+1) x Config.AckTimeout, so one lost ack never stalls the
// Batcher, a Flush or a shutdown. A retry is published after the events
// added since, so it stores p out of order if the first publish itself (not
// only its ack) was lost.
func (b *Batcher) await(ctx context.Context, p *Pending) {
	// Not cut short by ctx: every event whose Add succeeded gets its outcome.
	ack, retried, err := b.l.awaitAck(context.WithoutCancel(ctx), p.fut, p.msg)
	switch {
	case err != nil:
		p.err = b.l.translate(err, &p.e)
	default:
		p.seq = Seq(ack.Sequence)
		if ack.Duplicate && !retried {
			p.err = fmt.Errorf("%w: id %q already stored at seq %d", ErrDuplicate, p.e.ID, ack.Sequence)
		}
	}
	if p.err == nil {
		b.l.metrics.appended.WithLabelValues(p.stream).Inc()
	}
	close(p.ready)
}

func drain(in chan *Pending, group []*Pending) []*Pending {
	for {
		select {
		case p := <-in:
			group = append(group, p)
		default:
			return group
		}
	}
}

// commit stores group as one atomic batch and resolves its Pendings.
func (b *Batcher) commit(ctx context.Context, group []*Pending) {
	if b.l.cfg.Owner != nil {
		b.commitFenced(ctx, group)
		return
	}
	// The messages were built by Add; a group is at most MaxCount <=
	// Config.MaxBatch events, so it is one atomic batch.
	msgs := make([]*nats.Msg, len(group))
	var err error
	for i, p := range group {
		msgs[i] = p.msg
		if p.stream != group[0].stream {
			err = invalidf("batcher mixes streams %s and %s", group[0].stream, p.stream)
		}
	}
	var last Seq
	if err == nil {
		last, err = b.l.commitBatch(ctx, group[0].stream, msgs, nil)
	}
	for i, p := range group {
		if err == nil {
			// An atomic batch is stored contiguously.
			p.seq = last - Seq(len(group)-1-i)
		}
		p.err = err
		close(p.ready)
	}
}

// maxFencedRetries bounds how often a fenced batch is sent again without the
// streams another writer took over.
const maxFencedRetries = 3

// commitFenced stores group with each chat stream fenced on its first chunk
// in the batch. When the batch conflicts, the streams another writer took
// over fail with ErrFenced and the rest is sent again, so one stale stream
// never fails the other agents' chunks.
func (b *Batcher) commitFenced(ctx context.Context, group []*Pending) {
	resolve := func(p *Pending, seq Seq, err error) {
		p.seq, p.err = seq, err
		close(p.ready)
	}
	for attempt := 0; len(group) > 0; attempt++ {
		evs := make([]*Event, len(group))
		msgs := make([]*nats.Msg, len(group))
		errs := make([]error, len(group))
		for i, p := range group {
			evs[i], msgs[i] = &p.e, p.msg
		}
		fs := b.l.fenceChunks(evs, msgs, errs)
		send := make([]*nats.Msg, 0, len(group))
		pos := make([]int, len(group))
		for i, p := range group {
			if errs[i] != nil {
				resolve(p, 0, errs[i])
				continue
			}
			pos[i] = len(send)
			send = append(send, msgs[i])
		}
		if len(send) == 0 {
			return
		}
		last, err := b.l.commitBatch(ctx, b.l.cfg.ChunksStream, send, nil)
		if err == nil {
			n := Seq(len(send))
			seqOf := func(i int) Seq { return last - (n - 1 - Seq(pos[i])) }
			advanceChunks(fs, seqOf)
			for i, p := range group {
				if errs[i] == nil {
					resolve(p, seqOf(i), nil)
				}
			}
			return
		}
		var stale map[string]error
		if errors.Is(err, ErrConflict) && attempt < maxFencedRetries {
			var serr error
			if stale, serr = b.l.staleChunks(ctx, fs); serr != nil {
				err = errors.Join(err, serr)
				stale = nil
			}
		}
		if len(stale) == 0 {
			if !errors.Is(err, ErrConflict) {
				forgetChunks(fs)
			}
			for i, p := range group {
				if errs[i] == nil {
					resolve(p, 0, err)
				}
			}
			return
		}
		rest := group[:0:0]
		for i, p := range group {
			switch serr, ok := stale[p.msg.Subject]; {
			case errs[i] != nil:
			case ok:
				resolve(p, 0, serr)
			default:
				rest = append(rest, p)
			}
		}
		group = rest
	}
}
