package eventlog

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// committer group-commits the single-event appends of one stream (Append of
// lifecycle events, fenced or not): one send in flight; the appends that
// come meanwhile wait and go together as the next send, one atomic batch
// (one fsync under sync always) or pipelined, as sendCost says. An append
// that finds nothing in flight is published at once, alone, exactly as
// without the committer: a lone writer never waits for company.
//
// Leader and followers, no goroutine of its own: the append that finds
// the committer idle sends; when its send is done it hands the next send
// to the first waiting append's goroutine, which takes everything waiting.
type committer struct {
	mu    sync.Mutex
	busy  bool     // a send is in flight or about to be
	queue []*write // appends waiting for the next send, in arrival order
	// onGroup, set only by tests, is told the message ids of every send of
	// two or more appends before it goes out.
	onGroup func(ids []string)
}

// write is one append waiting in a committer.
type write struct {
	ctx    context.Context
	m      *nats.Msg
	expect *Seq
	e      *Event
	seq    Seq
	err    error
	done   chan struct{} // closed once seq and err are set
	lead   chan struct{} // receives once: this append's goroutine sends next
	leader bool          // lead was (or is being) signalled; guarded by committer.mu
}

// publish appends m, expecting expect on its subject when not nil, and
// returns its sequence as publishOne does; concurrent calls share sends.
func (l *Log) publish(ctx context.Context, m *nats.Msg, stream string, expect *Seq, e *Event) (Seq, error) {
	c := &l.committers[0]
	if stream == l.cfg.ChunksStream {
		c = &l.committers[1]
	}
	c.mu.Lock()
	if !c.busy {
		c.busy = true
		c.mu.Unlock()
		seq, err := l.publishOne(ctx, m, stream, "single", expect, e)
		l.handOff(c)
		return seq, err
	}
	w := &write{ctx: ctx, m: m, expect: expect, e: e, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	c.queue = append(c.queue, w)
	c.mu.Unlock()
	select {
	case <-w.done:
		return w.seq, w.err
	case <-w.lead:
		l.lead(c, stream)
		return w.seq, w.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	if w.leader {
		// Chosen to send the next group while ctx ended: send it anyway,
		// the others wait for it.
		c.mu.Unlock()
		<-w.lead
		l.lead(c, stream)
		return w.seq, w.err
	}
	for i, q := range c.queue {
		if q == w {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			break
		}
	}
	// Not sent, or in a send whose outcome this caller no longer waits for
	// (as a publish whose ctx ended: it may be stored).
	c.mu.Unlock()
	return 0, ctx.Err()
}

// handOff ends a send: the first waiting append's goroutine sends next,
// or the committer goes idle.
func (l *Log) handOff(c *committer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		c.busy = false
		return
	}
	next := c.queue[0]
	next.leader = true
	next.lead <- struct{}{}
}

// lead sends what waits in c (at most Config.MaxBatch appends, the caller's
// own first), resolves each, and hands off.
func (l *Log) lead(c *committer, stream string) {
	c.mu.Lock()
	n := min(len(c.queue), l.cfg.MaxBatch)
	group := c.queue[:n:n]
	c.queue = c.queue[n:]
	onGroup := c.onGroup
	c.mu.Unlock()
	if onGroup != nil && n > 1 {
		ids := make([]string, n)
		for i, w := range group {
			ids[i] = w.m.Header.Get(jetstream.MsgIDHeader)
		}
		onGroup(ids)
	}
	l.sendWrites(stream, group)
	for _, w := range group {
		close(w.done)
	}
	l.handOff(c)
}

// sendWrites stores group and sets each write's outcome. A write's error
// is its own: when an atomic batch fails (one write's expected sequence
// did not hold: a stale owner, a lost compare-and-set; a duplicate id),
// nothing of it was stored, and every write is sent again on its own, so
// the others are stored and only the failing one gets its error.
func (l *Log) sendWrites(stream string, group []*write) {
	if len(group) == 1 {
		w := group[0]
		w.seq, w.err = l.publishOne(w.ctx, w.m, stream, "single", w.expect, w.e)
		return
	}
	// Sent for several callers: no one caller's cancellation stops it; each
	// wait for the server is bounded by Config.AckTimeout.
	ctx := context.WithoutCancel(group[0].ctx)
	ws := make([]*wire, len(group))
	for i, w := range group {
		ws[i] = &wire{msg: w.m, expect: w.expect}
	}
	retried := false
	if l.cost(stream).atomic(len(ws)) {
		err := l.sendAtomic(ctx, stream, ws)
		if err == nil {
			for i, w := range group {
				w.seq = ws[i].seq
			}
			return
		}
		var apiErr *jetstream.APIError
		// Refused by the server: nothing stored. Otherwise (the answer was
		// lost) the batch may be stored, and a duplicate acknowledgement
		// of a write sent again below is that batch's.
		retried = !errors.As(err, &apiErr)
	}
	l.sendPipelined(ctx, stream, ws, false)
	for i, w := range group {
		wi := ws[i]
		w.seq, w.err = wi.seq, wi.err
		if wi.err == nil && wi.dup && !retried {
			w.err = fmt.Errorf("%w: id %q already stored at seq %d", ErrDuplicate, w.m.Header.Get(jetstream.MsgIDHeader), wi.seq)
		}
	}
}
