package eventlog

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
)

// AppendAll stores evs, events of one agent, in order, and returns the
// sequence of the last once all are acknowledged. It is Append for several
// events at about the cost of one round trip: they go pipelined in a chain,
// or as one atomic batch where the measured costs say that is cheaper (see
// sendCost), fenced as Append is on the first. Like Append's, they share
// the stream's group commit (committer) with the appends of other agents
// made meanwhile. Unlike AppendBatch, a
// failure part way may leave a prefix of evs stored, but never a gap, and
// under an Owner never another writer's event of the agent between them
// (other agents' events may come between them on the stream): use it for
// events each of which a retry or a recovery can tell is stored (a turn's message, usage
// and turn.completed), and AppendBatch for a set that must be whole.
//
// ExpectSeq makes the chain conditional as it does an Append: its first
// event is stored only if the agent's last event is still seq, and a
// mismatch stores nothing and returns ErrConflict.
//
// A failure part way returns the sequence of the stored prefix's last
// event with the error: 0 when nothing of evs is known stored.
//
// Errors are Append's; ErrDuplicate when every event was stored before.
func (l *Log) AppendAll(ctx context.Context, evs []Event, opts ...AppendOpt) (Seq, error) {
	switch {
	case len(evs) == 0:
		return 0, invalidf("no events to append")
	case len(evs) == 1:
		return l.Append(ctx, evs[0], opts...)
	}
	var o appendOpts
	for _, opt := range opts {
		opt(&o)
	}
	msgs := make([]*nats.Msg, len(evs))
	var stream string
	for i := range evs {
		if evs[i].Stream != "" {
			return 0, invalidf("AppendAll takes events, not chunks (%s of stream %q)", evs[i].Type, evs[i].Stream)
		}
		if evs[i].Agent != evs[0].Agent {
			return 0, invalidf("AppendAll mixes agents %q and %q", evs[0].Agent, evs[i].Agent)
		}
		m, s, err := l.message(&evs[i])
		if err != nil {
			return 0, fmt.Errorf("event %d: %w", i, err)
		}
		msgs[i], stream = m, s
	}
	send := func(expect *Seq) (Seq, error) {
		return l.publishChain(ctx, stream, msgs, expect)
	}
	if l.cfg.Owner == nil {
		return send(o.expect)
	}
	return l.fenced(ctx, evs[0].Agent, msgs[0], o.expect, func(expect *Seq) (Seq, error) {
		for _, m := range msgs[1:] {
			stampLike(m, msgs[0])
		}
		return send(expect)
	})
}

// sendChain sends ws, in order, as an atomic batch or a pipelined chain
// (whichever is cheaper), and returns the sequence of the last stored and
// the first error. A chain that stored nothing new (every message a
// duplicate) is ErrDuplicate.
//
// A chain is stream-wide (each message expects the one before it to be the
// stream's last), so another agent's event published between two of ours
// breaks it: what is stored is then a prefix, and the rest is sent again
// after it. Under an Owner the rest's first message
// expects the agent's subject to end at the prefix's last, so a writer that
// took the agent over meanwhile fences the rest out instead of being
// written after.
func (l *Log) sendChain(ctx context.Context, stream string, ws []*wire) (Seq, error) {
	if l.cost(stream).atomic(len(ws)) {
		if err := l.sendAtomic(ctx, stream, ws); err != nil {
			return 0, err
		}
		return ws[len(ws)-1].seq, nil
	}
	var last Seq
	stored, dups := 0, 0
	total := len(ws)
	// Each round stores at least one more message (a chain breaks only
	// after its first), so it ends.
	for {
		l.sendPipelined(ctx, stream, ws, true)
		i := 0
		for ; i < len(ws) && ws[i].err == nil; i++ {
			stored++
			if ws[i].dup {
				dups++
			}
			last = ws[i].seq
		}
		if i == len(ws) {
			break
		}
		err := ws[i].err
		if i == 0 || !brokenChain(err) {
			return last, err
		}
		rest := ws[i:]
		for _, w := range rest {
			w.seq, w.err, w.dup = 0, nil, false
		}
		if l.cfg.Owner != nil {
			prev := last
			rest[0].expect = &prev
		}
		ws = rest
	}
	if dups == total && stored == total {
		return last, fmt.Errorf("%w: %d events already stored, the last at seq %d", ErrDuplicate, total, last)
	}
	return last, nil
}
