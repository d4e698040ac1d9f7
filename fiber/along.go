package fiber

import (
	"context"
	"fmt"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/backoff"
)

// Along appends the caller's own events with the fiber's fiber.started, in
// one chain after it (the Log's AppendAll: one round trip where
// fiber.started and the caller's first write were two), fenced as
// fiber.started is (AfterSeq). build is called once the fiber's ID is
// known and before anything is appended; its events are of the Runner's
// agent, each one a retry or a recovery can tell is stored (a chat turn's
// turn.started). An error of build aborts the start with nothing
// appended: Go or Run returns it.
//
// When Go or Run returns without error fiber.started is stored, and *out
// says what became of the events: all stored (out.Err nil, out.Seq the
// last one's sequence), or not known stored (out.Err): refused (nothing of
// them is stored, now or later), or of unknown fate (they may be stored,
// now or later; eventlog.Settle each to find out, in order). A crash
// between the two leaves fiber.started without the events: the state a
// crash between two appends left. A Log without AppendAll gets
// fiber.started, then the events, one append each.
func Along(build func(id string) ([]eventlog.Event, error), out *Alongside) RunOpt {
	return func(o *runOpts) { o.along, o.alongOut = build, out }
}

// Alongside is what became of Along's events.
type Alongside struct {
	// Seq is the last event's sequence once all are stored.
	Seq eventlog.Seq
	// Err, when not nil, is why they are not known stored.
	Err error
}

// startAlong appends e, f's fiber.started, and evs after it in one chain
// (cond applying to e), and returns nil once fiber.started is stored, with
// the fate of evs in out; else the error, when fiber.started is not
// stored, or its fate could not be settled.
func (r *Runner) startAlong(ctx context.Context, f *Fiber, e eventlog.Event, evs []eventlog.Event, cond []eventlog.AppendOpt, out *Alongside) error {
	cl, ok := r.log.(chainLog)
	if !ok || len(evs) == 0 {
		seq, err := r.startOne(ctx, f, e, cond)
		if err != nil || len(evs) == 0 {
			out.Seq = seq
			return err
		}
		out.Seq, out.Err = r.appendChain(ctx, evs)
		return nil
	}
	chain := append([]eventlog.Event{e}, evs...)
	seq, err := cl.AppendAll(ctx, chain, cond...)
	// Refused while a leader is elected, with nothing stored: sent again
	// whole, as a single append is (retryUnwritten). Once a prefix is
	// stored the rest's fate is the caller's.
	for n := 0; err != nil && seq == 0 && eventlog.Unwritten(err) && n < unwrittenRetries; n++ {
		if !r.waitRetry(ctx, n) {
			break
		}
		r.metrics.appendRetries.Inc()
		seq, err = cl.AppendAll(ctx, chain, cond...)
	}
	switch {
	case err == nil:
		r.noteSeq(seq)
		out.Seq = seq
		return nil
	case seq > 0:
		// A prefix is stored: fiber.started at least, the rest refused or
		// unknown.
		r.noteSeq(seq)
		out.Err = fmt.Errorf("fiber: the events along fiber.started of %s: %w", f.id, err)
		return nil
	case !startUnknown(err):
		return err // answered: nothing stored
	}
	// No answer: fiber.started is settled first; the events after it
	// stay of unknown fate for the caller to settle.
	if serr := r.settleStart(ctx, f, e, err); serr != nil {
		return serr
	}
	out.Err = fmt.Errorf("%w: the events along fiber.started of %s: %w", eventlog.ErrUnconfirmed, f.id, err)
	return nil
}

// startOne appends e, f's fiber.started, alone, settling an unknown fate,
// and returns its sequence (0 when settled: not needed then).
func (r *Runner) startOne(ctx context.Context, f *Fiber, e eventlog.Event, cond []eventlog.AppendOpt) (eventlog.Seq, error) {
	seq, err := r.appendEvent(ctx, e, cond...)
	if err != nil && startUnknown(err) {
		// Sent, and no answer came: fiber.started may be stored, now
		// or later. Letting the name go now could leave a second live
		// fiber of the same name in the log (its caller sends the
		// command again), so the fiber holds its name until the log
		// says whether it started.
		seq, err = 0, r.settleStart(ctx, f, e, err)
	}
	return seq, err
}

// waitRetry waits the backoff before the nth resend, or reports false when
// ctx ended first.
func (r *Runner) waitRetry(ctx context.Context, n int) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(backoff.Exp(50*time.Millisecond, 2*time.Second, n)):
		return true
	}
}

// startWith builds o's Along events for f and appends them with e, f's
// fiber.started (startAlong).
func (r *Runner) startWith(ctx context.Context, f *Fiber, e eventlog.Event, cond []eventlog.AppendOpt, o runOpts) error {
	if o.alongOut == nil {
		return invalidf("start %s: Along without a result", f.id)
	}
	*o.alongOut = Alongside{}
	evs, err := o.along(f.id)
	if err != nil {
		return err
	}
	for _, x := range evs {
		if x.Agent != r.cfg.Agent {
			return invalidf("start %s: event %s is of agent %q, not %q", f.id, x.Type, x.Agent, r.cfg.Agent)
		}
		if x.Stream != "" {
			return invalidf("start %s: event %s is a chunk", f.id, x.Type)
		}
	}
	return r.startAlong(ctx, f, e, evs, cond, o.alongOut)
}
