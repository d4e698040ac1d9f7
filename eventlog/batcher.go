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

// DefaultBatchCount is BatcherConfig.MaxCount's default.
const DefaultBatchCount = 256

// BatcherConfig configures NewBatcher. Zero fields take the defaults.
type BatcherConfig struct {
	// MaxCount flushes a batch once it holds this many events (capped at
	// Config.MaxBatch). Default 256.
	MaxCount int
	// MaxDelay, when positive, makes a batch wait this long after its first
	// event for more before it is sent. Default 0: no wait. A batch is sent
	// as soon as the one before it is stored, with whatever came meanwhile,
	// so under load the batches grow by themselves and a lone writer never
	// waits for company that is not coming (measured with go run ./bench
	// -run '^(tool-call|chat-chunks)$': a 50us linger cost each of a tool
	// call's three flushes its wait, and gave no more chunks per second).
	MaxDelay time.Duration
}

// ErrStopped is returned by Batcher.Add once the Batcher's Run has
// returned, and (wrapped) by Projector.WaitFor once the Projector's Run has
// returned because its ctx ended.
var ErrStopped = errors.New("eventlog: stopped")

// Batcher group-commits events from many writers: one batch in flight;
// while it is stored the next one fills, so the batch size adapts to the
// load, and a batch is sent as soon as the one before is stored (or by
// count). A batch is stored as one JetStream atomic batch or pipelined in a
// chain, whichever the measured costs say is cheaper (see sendCost).
// (Several batches in flight measured worse: the stream commits them one
// at a time anyway, and smaller batches cost more fsyncs.) Events added by
// one goroutine are stored in the order added, without gaps: a batch that
// fails part way leaves a prefix stored. All events of a Batcher must go to
// the same JetStream stream (chunks, or lifecycle events).
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
	gen    context.Context        // async mode: ends after its stream's next election (elections.next)
	after  *Pending               // After: sent only once it is stored; nil once resolved
	ready  chan struct{}
	seq    Seq
	err    error
	// onDone (OnDone) runs once p is resolved, in the goroutine that
	// resolved it.
	onDone func(*Pending)

	// envSize is the size of msg.Data without e.Data's part (dataSize);
	// replaced says that a Replace changed e.Data since msg.Data was built,
	// which seal then builds again (under mu).
	envSize  int
	replaced bool

	mu struct {
		sync.Mutex
		sealed bool // taken into a batch (or published): Replace fails
	}
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

// Event returns the event as it was stored, its Seq set, once Done is
// closed and Wait returned no error (a Replace before it was sent
// included); before that its Seq is 0.
func (p *Pending) Event() Event {
	select {
	case <-p.ready:
		e := p.e
		e.Seq = p.seq
		return e
	default:
		return p.e
	}
}

// resolved closes ready, p's seq and err set, and runs its OnDone.
func (p *Pending) resolved() {
	close(p.ready)
	if p.onDone != nil {
		p.onDone(p)
	}
}

// OnDone makes fn run once the event is resolved (stored, a duplicate, or
// failed: fn reads which with Wait), in the Batcher's goroutine that
// resolved it, in the order the Batcher resolves its events (a chain made
// with After resolves in order). fn must not block: it runs before the
// Batcher's next batch. A chat stream's writer uses it to pass each stored
// chunk on to live followers at once (chunk.Live).
func OnDone(fn func(*Pending)) AddOption {
	return func(p *Pending) { p.onDone = fn }
}

// NewBatcher returns a Batcher; call Run to start it.
func (l *Log) NewBatcher(cfg BatcherConfig) *Batcher {
	if cfg.MaxCount <= 0 {
		cfg.MaxCount = DefaultBatchCount
	}
	cfg.MaxCount = min(cfg.MaxCount, l.cfg.MaxBatch)
	b := &Batcher{l: l, cfg: cfg, in: make(chan *Pending, cfg.MaxCount), async: l.asyncBatches()}
	b.mu.quiet = make(chan struct{})
	return b
}

// AddOption is an option of Batcher.Add.
type AddOption func(*Pending)

// After chains the event behind prev, an event added to the same Batcher
// before it: the event is sent only if prev was stored, and fails unsent,
// with prev's error, if prev failed. A writer that chains each event of a
// sequence to the one before (a chat stream's chunks) never leaves a gap:
// what is stored is a prefix of what it added. A nil prev chains nothing.
// (Under Config.AsyncBatches, which publishes in Add, it has no effect.)
func After(prev *Pending) AddOption {
	return func(p *Pending) { p.after = prev }
}

// Add validates e and queues it. Bad input (ErrInvalid, ErrTooLarge) is
// returned at once and queues nothing. The returned Pending reports when the
// event is stored.
func (b *Batcher) Add(ctx context.Context, e Event, opts ...AddOption) (*Pending, error) {
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
	p := &Pending{e: e, msg: m, stream: stream, ready: make(chan struct{}), envSize: len(m.Data) - dataSize(e.Data)}
	for _, o := range opts {
		o(p)
	}
	p.mu.sealed = b.async // published below, before anyone can Replace it
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
		p.gen = b.l.elections.next(p.stream)
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
		if b.cfg.MaxDelay > 0 {
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
		}
		// What came while the last batch was stored, up to MaxCount.
	drain:
		for len(group) < b.cfg.MaxCount {
			select {
			case p := <-in:
				group = append(group, p)
			default:
				break drain
			}
		}
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
	ack, retried, err := b.l.awaitAck(context.WithoutCancel(ctx), p.stream, p.gen, p.fut, p.msg)
	switch {
	case err != nil:
		p.err = b.l.translate(err, &p.e)
	default:
		p.seq = b.l.seqOf(p.stream, ack.Sequence)
		if ack.Duplicate && !retried {
			p.err = fmt.Errorf("%w: id %q already stored at seq %d", ErrDuplicate, p.e.ID, p.seq)
		}
	}
	if p.err == nil {
		b.l.metrics.appended.WithLabelValues(p.stream).Inc()
	}
	p.resolved()
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

// maxFencedRetries bounds how often a group is sent again without the
// streams another writer took over, or after another writer's message broke
// a pipelined chain.
const maxFencedRetries = 3

// commit stores group and resolves its Pendings: as one atomic batch, or
// pipelined in a chain (see sendCost), whichever the measured costs say is
// cheaper. Under an Owner each chat stream is fenced on its first chunk in
// the group; when that conflicts, the streams another writer took over fail
// with ErrFenced and the rest is sent again, so one stale stream never
// fails the other agents' chunks.
func (b *Batcher) commit(ctx context.Context, group []*Pending) {
	for _, p := range group {
		p.seal()
	}
	stream := group[0].stream
	var byStream map[string][]*Pending // of a sharded log: the group of each shard
	for _, p := range group {
		if p.stream == stream {
			continue
		}
		if h, h0 := b.l.handleOf(p.stream), b.l.handleOf(stream); h == nil || h0 == nil || h.chunks != h0.chunks {
			// The messages were built by Add for this Log: only a caller
			// mixing events and chunks gets here.
			err := invalidf("batcher mixes streams %s and %s", stream, p.stream)
			for _, p := range group {
				fail(p, err)
			}
			return
		}
		byStream = map[string][]*Pending{}
	}
	if byStream != nil {
		// Shards of one kind: each shard's events in the order added,
		// one shard's send after the other.
		var order []string
		for _, p := range group {
			if byStream[p.stream] == nil {
				order = append(order, p.stream)
			}
			byStream[p.stream] = append(byStream[p.stream], p)
		}
		for _, s := range order {
			b.commitStream(ctx, s, byStream[s])
		}
		return
	}
	b.commitStream(ctx, stream, group)
}

// commitStream is commit of a group whose events all go to stream.
func (b *Batcher) commitStream(ctx context.Context, stream string, group []*Pending) {
	// Each attempt stores at least the first of its chunks unless that one
	// fails, so only attempts that stored nothing count.
	for attempt := 0; len(group) > 0; {
		group = b.unbroken(group)
		send, ws, fs := b.fence(group)
		if len(send) == 0 {
			return
		}
		var rest []*Pending
		var err error
		if len(ws) == 1 || !b.l.cost(stream).atomic(len(ws)) {
			rest, err = b.pipelined(ctx, stream, send, ws, fs)
		} else {
			rest, err = b.atomic(ctx, stream, send, ws, fs)
		}
		if len(rest) > 0 && (err != nil || attempt == maxFencedRetries) {
			if err == nil {
				err = fmt.Errorf("%w: chunks not stored after %d attempts: other writes kept coming between them, or the stream's leader kept refusing them while it changed", ErrUnavailable, attempt+1)
			}
			for _, p := range rest {
				fail(p, err)
			}
			return
		}
		if len(rest) == len(group) {
			attempt++
		}
		group = rest
	}
}

// fail resolves p with err.
func fail(p *Pending, err error) {
	p.seq, p.err, p.after = 0, err, nil
	p.resolved()
}

// brokenAfter returns the error of the event p is chained behind (After),
// when that one failed: p must not be sent. A duplicate counts as stored.
// The chain is cut behind events known stored, so it holds no history.
func brokenAfter(p *Pending) error {
	a := p.after
	if a == nil {
		return nil
	}
	select {
	case <-a.ready:
	default:
		return nil // ahead of p in this group: sent before it, in order
	}
	p.after = nil
	if a.err == nil || errors.Is(a.err, ErrDuplicate) {
		return nil
	}
	return fmt.Errorf("eventlog: %s not sent: the event before it (%s) was not stored: %w", p.e.ID, a.e.ID, a.err)
}

// unbroken fails the Pendings of group chained (After) behind one that
// failed, and returns the others: group itself, without a copy, when none
// failed (every commit of the chunk path passes here).
func (b *Batcher) unbroken(group []*Pending) []*Pending {
	var out []*Pending
	for i, p := range group {
		err := brokenAfter(p)
		switch {
		case err != nil:
			if out == nil {
				out = append(make([]*Pending, 0, len(group)), group[:i]...)
			}
			fail(p, err)
		case out != nil:
			out = append(out, p)
		}
	}
	if out == nil {
		return group
	}
	return out
}

// fence returns the wires to send for group: under an Owner, each chat
// stream's first chunk expects the stream's last sequence, and chunks of
// agents not owned or fenced are resolved with their error and left out.
// send are the Pendings of the wires.
func (b *Batcher) fence(group []*Pending) (send []*Pending, ws []*wire, fs map[string]*chunkFence) {
	if b.l.cfg.Owner == nil {
		ws = make([]*wire, len(group))
		for i, p := range group {
			ws[i] = &wire{msg: p.msg}
		}
		return group, ws, nil
	}
	evs := make([]*Event, len(group))
	msgs := make([]*nats.Msg, len(group))
	errs := make([]error, len(group))
	for i, p := range group {
		evs[i], msgs[i] = &p.e, p.msg
	}
	fs = b.l.fenceChunks(evs, msgs, errs)
	for i, p := range group {
		if errs[i] != nil {
			fail(p, errs[i])
			continue
		}
		w := &wire{msg: p.msg}
		if cf := fs[p.msg.Subject]; cf.first == i {
			w.expect = &cf.expect
		}
		send, ws = append(send, p), append(ws, w)
	}
	return send, ws, fs
}

// atomic sends ws (the messages of send) as one atomic batch. It returns
// the Pendings to send again (the batch conflicted: those of the streams
// still ours), or an error for all that are left.
func (b *Batcher) atomic(ctx context.Context, stream string, send []*Pending, ws []*wire, fs map[string]*chunkFence) ([]*Pending, error) {
	err := b.l.sendAtomic(ctx, stream, ws)
	if err == nil {
		for i, p := range send {
			b.stored(p, ws[i].seq, fs)
		}
		return nil, nil
	}
	if !errors.Is(err, ErrConflict) || fs == nil {
		forgetChunks(fs)
		return send, err
	}
	return b.dropStale(ctx, send, fs, err)
}

// pipelined sends ws (the messages of send) one by one in a chain, so a
// prefix of them is stored. It resolves the stored ones and returns the
// Pendings to send again (the first refused one was fenced, or another
// writer's message broke the chain), or an error for all that are left.
func (b *Batcher) pipelined(ctx context.Context, stream string, send []*Pending, ws []*wire, fs map[string]*chunkFence) ([]*Pending, error) {
	b.l.sendPipelined(ctx, stream, ws, true)
	i := 0
	for ; i < len(ws) && ws[i].err == nil; i++ {
		p, w := send[i], ws[i]
		if w.dup {
			// Stored before (a retried Add), as in async mode. Its
			// stream's fence is left as it is: if it is behind, the next
			// chunk conflicts and dropStale finds the last chunk is ours.
			p.seq, p.err, p.after = w.seq, duplicateErr(p, w.seq), nil
			p.resolved()
			continue
		}
		b.stored(p, w.seq, fs)
	}
	if i == len(ws) {
		return nil, nil
	}
	rest, err := send[i:], ws[i].err
	switch {
	case brokenChain(err):
		// Another writer's message, or a duplicate of ours, came between:
		// nothing after it was stored; send the rest again.
		return rest, nil
	case errors.Is(err, ErrConflict) && fs != nil:
		cf := fs[send[i].msg.Subject]
		one := map[string]*chunkFence{send[i].msg.Subject: {f: cf.f, tok: cf.tok, agent: cf.agent, stream: cf.stream, expect: *ws[i].expect}}
		return b.dropStale(ctx, rest, one, err)
	}
	// The refused message may be stored (a lost ack): the next chunks of
	// these streams read the stream's last sequence again.
	forgetChunks(fs)
	return rest, err
}

// dropStale, after a send of rest conflicted (err), checks the streams of
// fs: the Pendings of streams another writer took over fail with ErrFenced
// and the others are returned to be sent again.
func (b *Batcher) dropStale(ctx context.Context, rest []*Pending, fs map[string]*chunkFence, err error) ([]*Pending, error) {
	stale, moved, serr := b.l.staleChunks(ctx, fs)
	if serr != nil {
		// Refused, so not stored; who wrote last cannot be told now.
		return rest, unreadableRefusal(err, serr)
	}
	if len(stale) == 0 && !moved {
		// Every stream is where this writer left it: the refusal came
		// from a stream leader that had not caught up with its log (a
		// leader change). Send again; commit bounds the attempts.
		b.l.logger.Info("chunks refused by a stream leader behind its log; sending them again", "err", err)
		return rest, nil
	}
	left := rest[:0:0]
	for _, p := range rest {
		if serr, ok := stale[p.msg.Subject]; ok {
			fail(p, serr)
			continue
		}
		left = append(left, p)
	}
	return left, nil
}

// stored resolves p as stored at seq and moves its stream's fence on.
func (b *Batcher) stored(p *Pending, seq Seq, fs map[string]*chunkFence) {
	if cf := fs[p.msg.Subject]; cf != nil {
		cf.f.mu.Lock()
		if cf.f.mu.tok == cf.tok {
			cf.f.mu.streams[cf.stream] = seq
		}
		cf.f.mu.Unlock()
	}
	p.seq, p.err, p.after = seq, nil, nil
	p.resolved()
}

// duplicateErr is the error of a Pending whose event was stored before.
func duplicateErr(p *Pending, seq Seq) error {
	return fmt.Errorf("%w: id %q already stored at seq %d", ErrDuplicate, p.e.ID, seq)
}
