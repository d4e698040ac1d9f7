package eventlog

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Defaults of BatcherConfig.
const (
	DefaultBatchCount = 256
	DefaultBatchDelay = 2 * time.Millisecond
)

// BatcherConfig configures NewBatcher. Zero fields take the defaults.
type BatcherConfig struct {
	// MaxCount flushes a batch once it holds this many events (capped at
	// Config.MaxBatch). Default 256.
	MaxCount int
	// MaxDelay flushes a batch this long after its first event arrived.
	// Default 2ms.
	MaxDelay time.Duration
}

// ErrStopped is returned by Batcher.Add and Pending.Wait once the Batcher's
// Run has returned.
var ErrStopped = errors.New("eventlog: batcher stopped")

// Batcher group-commits events from many writers: it collects events into one
// JetStream atomic batch, flushed by count or after MaxDelay, with one batch
// in flight at a time. While a batch commits the next one fills, so the batch
// size adapts to the load. Events added by one goroutine are stored in the
// order added. All events of a Batcher must go to the same JetStream stream
// (chunks, or lifecycle events).
//
// An event is durable once its Pending's Wait returns nil. Use it for
// high-rate writes such as chat chunks, where a fsync per event is too slow.
type Batcher struct {
	l   *Log
	cfg BatcherConfig
	in  chan *Pending

	mu struct {
		sync.Mutex
		stopped bool
		adders  int           // Adds between the stopped check and their send
		quiet   chan struct{} // closed once stopped and adders == 0
	}
}

// Pending is an event added to a Batcher, not yet known to be stored.
type Pending struct {
	e     Event
	ready chan struct{}
	seq   Seq
	err   error
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
	b := &Batcher{l: l, cfg: cfg, in: make(chan *Pending, cfg.MaxCount)}
	b.mu.quiet = make(chan struct{})
	return b
}

// Add validates e and queues it. Bad input (ErrInvalid, ErrTooLarge) is
// returned at once and queues nothing. The returned Pending reports when the
// event is stored.
func (b *Batcher) Add(ctx context.Context, e Event) (*Pending, error) {
	if _, _, err := b.l.message(&e); err != nil {
		return nil, err
	}
	p := &Pending{e: e, ready: make(chan struct{})}
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
	defer func() {
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
		rest = b.drain(rest, len(b.in))
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
		case p := <-b.in:
			group = append(group, p)
		}
		timer.Reset(b.cfg.MaxDelay)
	fill:
		for len(group) < b.cfg.MaxCount {
			select {
			case p := <-b.in:
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

func (b *Batcher) drain(group []*Pending, n int) []*Pending {
	for range n {
		select {
		case p := <-b.in:
			group = append(group, p)
		default:
			return group
		}
	}
	return group
}

// commit stores group as one atomic batch and resolves its Pendings.
func (b *Batcher) commit(ctx context.Context, group []*Pending) {
	evs := make([]Event, len(group))
	for i, p := range group {
		evs[i] = p.e
	}
	last, err := b.l.AppendBatch(ctx, evs)
	for i, p := range group {
		if err == nil {
			// An atomic batch is stored contiguously.
			p.seq = last - Seq(len(group)-1-i)
		}
		p.err = err
		close(p.ready)
	}
}
