package chat

import (
	"context"
	"fmt"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

// startChain starts a turn in one chain: its turn.started goes with its
// fiber's fiber.started (fiber.Along: the Log's AppendAll, one round trip
// where the two appends were two), both fenced on the agent's last event
// the checks read (fiber.AfterSeq). A crash between the two leaves
// fiber.started without turn.started, as a crash between the two appends
// did: recovery ends that fiber without a word (TestStartChainCut).
type startChain struct {
	a       *Agent
	t       turnStarted
	msg     *Message
	checked eventlog.Seq
	e       eventlog.Event // turn.started as appended, its id fixed
	out     fiber.Alongside
}

// chainStart returns the chain that starts turn t, a Send of msg or
// another command (msg nil), or nil when turn.started goes on its own
// after fiber.started (startAppends): a stale "turn" interrupt is cleared
// first, by an event of its own between the two. The store has caught up
// with checked; an interrupt set since moves the log past it, and the
// fenced chain then stores nothing and the start checks again.
func (a *Agent) chainStart(t turnStarted, msg *Message, checked eventlog.Seq) (*startChain, error) {
	set, err := a.store.Interrupted(a.agent, InterruptTurn)
	if err != nil || set {
		return nil, err
	}
	return &startChain{a: a, t: t, msg: msg, checked: checked}, nil
}

// build returns the chain's events once the fiber's id is known: the
// turn.started naming it, its large parts stored by reference first. An
// error stores nothing: the fiber does not start.
func (sc *startChain) build(ctx context.Context, fid string) ([]eventlog.Event, error) {
	t := sc.t
	t.FiberID = fid
	t, err := sc.a.offloadTurnStarted(ctx, t)
	if err != nil {
		return nil, err
	}
	e, err := sc.a.turnStartedEvent(t, sc.msg)
	if err != nil {
		return nil, err
	}
	sc.e = e
	return []eventlog.Event{e}, nil
}

// outcome is turn.started's, once its fiber started, as startAppends
// returns it: its sequence and event, or an error (see startFailed).
func (sc *startChain) outcome(ctx context.Context) (eventlog.Seq, eventlog.Event, error) {
	switch {
	case sc.out.Err != nil:
		return 0, sc.e, fmt.Errorf("chat: append %s: %w", EventTurnStarted, sc.out.Err)
	case sc.out.Seq <= sc.checked:
		// A chain stores a duplicate's id as the original's sequence,
		// not as an error (a send's copy of turn.started stored before
		// the checks): as an Append's ErrDuplicate, nothing of this turn
		// is stored.
		return 0, sc.e, fmt.Errorf("chat: append %s: %w: id %q stored before, at seq %d", EventTurnStarted, eventlog.ErrDuplicate, sc.e.ID, sc.out.Seq)
	}
	return sc.a.turnStored(ctx, sc.out.Seq, sc.e, sc.msg)
}
