package eventlog

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// committer group-commits the appends of one stream (Append of lifecycle
// events, fenced or not, and AppendAll's chains of one agent's events): one
// send in flight; the appends that come meanwhile wait and go together as
// the next send, one atomic batch (one fsync under sync always) or
// pipelined, as sendCost says. An append that finds nothing in flight is
// published at once, alone, exactly as without the committer: a lone writer
// never waits for company.
//
// A chain (AppendAll) shares the group's atomic batch, its events side by
// side in order, so that a hundred turns ending together cost one batch,
// not a hundred: on an R1 stream each atomic batch is staged in a store of
// its own, whatever its size (group.go). A group sent pipelined sends each
// chain on its own (sendChain) beside the single appends.
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
	ctx context.Context
	m   *nats.Msg
	// more are the events of an AppendAll after m, stored after it in
	// order, without a gap; nil for an Append.
	more   []*nats.Msg
	expect *Seq
	e      *Event
	seq    Seq
	err    error
	done   chan struct{} // closed once seq and err are set
	lead   chan struct{} // receives once: this append's goroutine sends next
	leader bool          // lead was (or is being) signalled; guarded by committer.mu
}

// size is the number of messages w stores.
func (w *write) size() int { return 1 + len(w.more) }

// wires returns fresh wires of w's messages, the first with w's expected
// sequence.
func (w *write) wires() []*wire {
	ws := make([]*wire, 0, w.size())
	ws = append(ws, &wire{msg: w.m, expect: w.expect})
	for _, m := range w.more {
		ws = append(ws, &wire{msg: m})
	}
	return ws
}

// publish appends m, expecting expect on its subject when not nil, and
// returns its sequence as publishOne does; concurrent calls share sends.
func (l *Log) publish(ctx context.Context, m *nats.Msg, stream string, expect *Seq, e *Event) (Seq, error) {
	return l.commit(ctx, stream, &write{ctx: ctx, m: m, expect: expect, e: e})
}

// publishChain appends msgs in order, the first expecting expect on its
// subject when not nil, as sendChain does, and returns the sequence of the
// last; concurrent calls and publish share sends.
func (l *Log) publishChain(ctx context.Context, stream string, msgs []*nats.Msg, expect *Seq) (Seq, error) {
	return l.commit(ctx, stream, &write{ctx: ctx, m: msgs[0], more: msgs[1:], expect: expect})
}

// commit stores w through stream's committer and returns its outcome.
func (l *Log) commit(ctx context.Context, stream string, w *write) (Seq, error) {
	h := l.handleOf(stream)
	if h == nil {
		return 0, invalidf("append to %s: not a stream of the log", stream)
	}
	c := &h.commit
	c.mu.Lock()
	if !c.busy {
		c.busy = true
		c.mu.Unlock()
		l.sendWrites(stream, []*write{w})
		l.handOff(c)
		return w.seq, w.err
	}
	w.done, w.lead = make(chan struct{}), make(chan struct{}, 1)
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

// lead sends what waits in c (the caller's own append first, then others
// while the group holds at most Config.MaxBatch messages), resolves each,
// and hands off.
func (l *Log) lead(c *committer, stream string) {
	c.mu.Lock()
	n, size := 1, c.queue[0].size()
	for n < len(c.queue) && size+c.queue[n].size() <= l.cfg.MaxBatch {
		size += c.queue[n].size()
		n++
	}
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
//
// A chain (AppendAll) keeps sendChain's contract: its events in order,
// a prefix stored on failure, never a gap. In an atomic batch its events
// are side by side; sent pipelined, each chain goes on its own.
func (l *Log) sendWrites(stream string, group []*write) {
	if len(group) == 1 {
		w := group[0]
		if len(w.more) > 0 {
			w.seq, w.err = l.sendChain(w.ctx, stream, w.wires())
			return
		}
		w.seq, w.err = l.publishOne(w.ctx, w.m, stream, "single", w.expect, w.e)
		return
	}
	// Sent for several callers: no one caller's cancellation stops it; each
	// wait for the server is bounded by Config.AckTimeout.
	ctx := context.WithoutCancel(group[0].ctx)
	var ws []*wire
	for _, w := range group {
		ws = append(ws, w.wires()...)
	}
	retried := false
	if l.cost(stream).atomic(len(ws)) {
		err := l.sendAtomic(ctx, stream, ws)
		if err == nil {
			i := 0
			for _, w := range group {
				i += w.size()
				w.seq = ws[i-1].seq
			}
			return
		}
		var apiErr *jetstream.APIError
		// Refused by the server: nothing stored. Otherwise (the answer was
		// lost) the batch may be stored, and a duplicate acknowledgement
		// of a write sent again below is that batch's.
		retried = !errors.As(err, &apiErr)
	}
	var singles []*write
	ws = ws[:0]
	for _, w := range group {
		if len(w.more) == 0 {
			singles = append(singles, w)
			ws = append(ws, w.wires()...)
		}
	}
	if len(ws) > 0 {
		l.sendPipelined(ctx, stream, ws, false)
	}
	for i, w := range singles {
		wi := ws[i]
		w.seq, w.err = wi.seq, wi.err
		if wi.err == nil && wi.dup && !retried {
			w.err = fmt.Errorf("%w: id %q already stored at seq %d", ErrDuplicate, w.m.Header.Get(jetstream.MsgIDHeader), wi.seq)
		}
	}
	for _, w := range group {
		if len(w.more) == 0 {
			continue
		}
		w.seq, w.err = l.sendChain(ctx, stream, w.wires())
		if retried && errors.Is(w.err, ErrDuplicate) {
			w.err = nil // stored by the batch whose answer was lost
		}
	}
}
