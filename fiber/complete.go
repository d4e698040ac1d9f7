package fiber

import (
	"context"
	"fmt"

	"github.com/forever-agents/forever/eventlog"
)

// chainLog is the part of a Log that appends several events in one round
// trip (eventlog.Log.AppendAll). A Log without it has Complete's chain
// appended one event at a time, in order.
type chainLog interface {
	AppendAll(ctx context.Context, evs []eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error)
}

// Complete ends the fiber from inside its function: it appends evs, the
// caller's own events of the Runner's agent, then the fiber's
// fiber.completed, as one chain (the Log's AppendAll: about one round trip,
// where the function's last write and the fiber's end were two), and
// returns the sequence of fiber.completed once it is durable.
//
// From then on the fiber is over: Stash and Step return ErrFiberDone, and
// when the function returns the Runner appends nothing more (an error it
// returns then is logged, not recorded). Call it only when nothing the
// function does afterwards needs the fiber to be recovered if the process
// dies.
//
// A crash may leave a prefix of the chain stored, never a gap: without
// fiber.completed the fiber is recovered as if Complete had not been
// called, so each of evs must be something its recovery can find stored
// (as for AppendAll).
//
// Errors: ErrFiberDone, ErrInvalid (an event of another agent), or an
// append error, after which the fiber is not over: a prefix of the chain
// may be stored, and the function returns the error as after a failed
// Stash.
func (f *Fiber) Complete(ctx context.Context, evs ...eventlog.Event) (eventlog.Seq, error) {
	return f.complete(ctx, false, evs)
}

// CompleteIn is Complete with the fiber's end carried by the last of evs
// (its Completes field) instead of a fiber.completed of its own: one
// record, one fsync, fewer, and no crash point between the caller's last
// write and the fiber's end. The Runner's views, and every reader that
// asks Records, apply that event as itself followed by the fiber's
// fiber.completed. A reader of an earlier release sees the event alone
// and the fiber as still running, so a cluster writes it only at a record
// format every node reads (agentd's FormatInlineEnds). Without evs it is
// Complete.
func (f *Fiber) CompleteIn(ctx context.Context, evs ...eventlog.Event) (eventlog.Seq, error) {
	return f.complete(ctx, len(evs) > 0, evs)
}

// complete is Complete, with the end carried by evs' last when inline.
func (f *Fiber) complete(ctx context.Context, inline bool, evs []eventlog.Event) (eventlog.Seq, error) {
	f.writeMu.Lock()
	defer f.writeMu.Unlock()
	if f.isDone() {
		return 0, ErrFiberDone
	}
	for _, e := range evs {
		if e.Agent != f.r.cfg.Agent {
			return 0, invalidf("complete %s: event %s is of agent %q, not %q", f.id, e.Type, e.Agent, f.r.cfg.Agent)
		}
	}
	var chain []eventlog.Event
	if inline {
		if last := evs[len(evs)-1]; last.Completes != "" && last.Completes != f.id {
			return 0, invalidf("complete %s: event %s already completes fiber %q", f.id, last.Type, last.Completes)
		}
		chain = append(chain, evs...)
		chain[len(chain)-1].Completes = f.id
	} else {
		end, err := event(f.r.cfg.Agent, EventCompleted, payload{ID: f.id})
		if err != nil {
			return 0, err
		}
		chain = append(evs[:len(evs):len(evs)], end)
	}
	seq, err := f.r.appendChain(ctx, chain)
	if err != nil {
		return 0, fmt.Errorf("fiber: complete %s: %w", f.id, err)
	}
	f.mu.Lock()
	f.mu.done, f.mu.completed = true, true
	f.mu.Unlock()
	return seq, nil
}

// Complete completes the fiber ctx runs in, from any code the fiber's
// function calls. Outside a fiber it returns ErrNoFiber. See
// (*Fiber).Complete.
func Complete(ctx context.Context, evs ...eventlog.Event) (eventlog.Seq, error) {
	f, ok := FromContext(ctx)
	if !ok {
		return 0, ErrNoFiber
	}
	return f.Complete(ctx, evs...)
}

// completed reports whether Complete stored the fiber's fiber.completed.
func (f *Fiber) completed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.completed
}

// appendChain appends evs in order in one chain when the Log can, else one
// by one, and returns the last one's sequence. Like appendEvent it waits
// out a stream electing a leader (bounded), sending again only a chain
// that was refused whole.
func (r *Runner) appendChain(ctx context.Context, evs []eventlog.Event) (eventlog.Seq, error) {
	cl, ok := r.log.(chainLog)
	if !ok {
		var seq eventlog.Seq
		for _, e := range evs {
			s, err := r.appendEvent(ctx, e)
			if err != nil {
				return 0, err
			}
			seq = s
		}
		return seq, nil
	}
	seq, err := r.retryUnwritten(ctx, func() (eventlog.Seq, error) { return cl.AppendAll(ctx, evs) })
	if err != nil {
		return 0, err
	}
	r.noteSeq(seq)
	return seq, nil
}
