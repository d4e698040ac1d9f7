package chat

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// activeTurn is the in-process handle of the running turn.
type activeTurn struct {
	requestID string
	// pending (guarded by Agent.mu) is set while the command that holds
	// the slot has not stored its turn: it may yet be refused (a turn
	// recovering), and a recovery waits for it instead of failing.
	// resolved is closed once it stored its turn or gave the slot back.
	pending     bool
	resolved    chan struct{}
	resolveOnce sync.Once
	// ending is set when the turn writes its terminal chunk, just before
	// the write: clients may see it end as soon as the chunk is durable,
	// before the write returns to the turn, and then only its records
	// remain to be appended. A new turn waits for done (closed by
	// release), bounded, instead of refusing: set after the write, a
	// client's next message that came first was refused (409) in CI.
	ending    atomic.Bool
	done      chan struct{}
	endOnce   sync.Once
	hold      slotHold                // released once, or kept (slot.go)
	run       *turnRun                // guarded by Agent.mu: the run holding the slot, nil while a command does
	admitted  bool                    // holds a slot of Config.Turns until released
	cancel    context.CancelCauseFunc // nil until the turn runs
	cancelled bool                    // Cancel came before the turn ran
}

// waitEnding waits for cur, a turn whose stream has ended, to append its
// records (a few ms): a client that saw the end and sent the next message
// at once (the AI SDK does, answering a tool call) waits for it. A turn
// still streaming is ErrTurnActive at once.
func waitEnding(ctx context.Context, cur *activeTurn) error {
	if !cur.ending.Load() {
		return ErrTurnActive
	}
	return waitBounded(ctx, cur, cur.done, "is still recording its end")
}

// waitResolved waits, bounded by endingWait, for cur, a turn that holds
// the slot without having stored its turn.started, to store it or give the
// slot back: a few ms, or as long as an append of unknown fate takes to
// settle. Past the bound it is ErrTurnActive.
func waitResolved(ctx context.Context, cur *activeTurn) error {
	return waitBounded(ctx, cur, cur.resolved, "is being confirmed")
}

// waitBounded waits, at most endingWait, for ch of cur to close; past the
// bound cur is ErrTurnActive, its turn doing what.
func waitBounded(ctx context.Context, cur *activeTurn, ch <-chan struct{}, what string) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(endingWait):
		return fmt.Errorf("%w: turn %s %s", ErrTurnActive, cur.requestID, what)
	}
}

// settle waits for the turn that runs, if its stream has ended, to record
// its end, so what the client saw in the stream is in the views. A turn
// still streaming is left alone: the caller's own checks refuse it.
func (a *Agent) settle(ctx context.Context) error {
	a.mu.Lock()
	cur := a.mu.active
	a.mu.Unlock()
	if cur == nil || !cur.ending.Load() {
		return nil
	}
	return waitEnding(ctx, cur)
}

// Settle waits, bounded, for the running turn, if its stream has ended, to
// record its end (its final assistant message, usage and outcome), so a
// read that follows sees what the stream showed: the AI SDK reads the
// conversation as soon as it reads the finish chunk, and a turn appends its
// final message after that chunk. A turn still streaming is not waited
// for; a turn that does not record its end within the bound is ErrTurnActive.
func (a *Agent) Settle(ctx context.Context) error { return a.settle(ctx) }

// endingWait bounds how long a new turn waits for the previous one to
// record its end after its terminal chunk.
const endingWait = 10 * time.Second

func newActiveTurn(requestID string) *activeTurn {
	return &activeTurn{requestID: requestID, done: make(chan struct{}), resolved: make(chan struct{})}
}

// resolve tells recoveries waiting for the slot that the command holding
// it stored its turn or gave the slot back.
func (at *activeTurn) resolve() { at.resolveOnce.Do(func() { close(at.resolved) }) }

// ended marks the turn's stream ending (its terminal chunk about to be
// written).
// A turn ended outside a run (abandoned) has no activeTurn.
func (at *activeTurn) ended() {
	if at != nil {
		at.ending.Store(true)
	}
}

// release frees the turn slot if at holds it. Its owner calls it once: a
// second call is reported (slotMisuse) and changes nothing.
func (a *Agent) release(at *activeTurn) {
	if !at.hold.release() {
		a.slotMisuse(at, "released twice")
		return
	}
	defer a.mt.notify() // queued messages and interrupting Sends look again
	defer at.endOnce.Do(func() { close(at.done) })
	defer at.resolve()
	a.mu.Lock()
	if a.mu.active == at {
		a.mu.active = nil
	}
	admitted := at.admitted
	at.admitted = false
	a.mu.Unlock()
	if admitted {
		a.cfg.Turns.release()
	}
}

// claim takes the turn slot for a recovered turn. A command that holds
// the slot without having stored its turn is waited for, whatever its
// identity: a command of another finds the recovering turn active and is
// refused (ErrTurnActive), so a command refused with 409 never fails the
// turn being recovered; a copy of the recovered turn's own command is
// answered with it (Send), and never runs it beside the recovery. A turn
// that runs is ErrTurnActive, or errRunsHere when it is the recovered
// turn itself: another fiber of this process runs it already.
func (a *Agent) claim(ctx context.Context, requestID string) (*activeTurn, error) {
	at := newActiveTurn(requestID)
	a.mu.Lock()
	defer a.mu.Unlock()
	for cur := a.mu.active; cur != nil; cur = a.mu.active {
		if !cur.pending && cur.requestID == requestID {
			return nil, fmt.Errorf("%w: turn %s", errRunsHere, requestID)
		}
		if !cur.pending {
			return nil, fmt.Errorf("%w: %s runs while %s is recovered", ErrTurnActive, cur.requestID, requestID)
		}
		a.mu.Unlock()
		select {
		case <-cur.resolved:
		case <-ctx.Done():
			a.mu.Lock()
			return nil, ctx.Err()
		}
		a.mu.Lock()
	}
	// Admitted before the crash: it must complete, past the bound if need be.
	_ = a.cfg.Turns.acquire(true)
	at.admitted = true
	a.mu.active = at
	return at, nil
}

// errRunsHere is claim's answer to the recovery of a turn that a fiber of
// this process runs already: the recovering fiber (a second fiber of the
// turn, whose fiber.started landed late) ends and leaves the turn alone.
var errRunsHere = errors.New("chat: the turn runs in another fiber of this process")

// slotHold is the bookkeeping of one hold of the agent's turn slot (the
// activeTurn that Agent.mu.active points at). Whoever holds the slot gives
// it back once: release it, or keep it on purpose. A turn.started whose
// append's fate is unknown keeps the slot until the agent restarts, so
// that nothing starts beside a turn that may yet land (see Agent.start).
//
// The hold is checked: a second release is a no-op that is reported, and
// a hold its owner ends without releasing or keeping (Agent.checkSlot) is
// reported and released. Reports go to Agent.slotMisuse.
type slotHold struct {
	state atomic.Uint32 // a holdState
}

const (
	holdHeld uint32 = iota
	holdKept
	holdReleased
)

// release marks the hold released and reports whether this call did; a
// second call changes nothing and reports false.
func (h *slotHold) release() bool { return h.state.Swap(holdReleased) != holdReleased }

// keep marks a held slot kept on purpose: it stays taken after its owner
// ends. A released hold stays released.
func (h *slotHold) keep() { h.state.CompareAndSwap(holdHeld, holdKept) }

// kept reports whether the hold was kept on purpose.
func (h *slotHold) kept() bool { return h.state.Load() == holdKept }

// held reports whether the hold is neither released nor kept.
func (h *slotHold) held() bool { return h.state.Load() == holdHeld }

// checkSlot is called by an owner of at's slot as it ends (a turn's
// fiber, a recovery): a hold neither released nor kept is a missing
// release, reported and then released, so the agent is not blocked for
// good by a path that forgot it.
func (a *Agent) checkSlot(at *activeTurn, owner string) {
	if at == nil || !at.hold.held() {
		return
	}
	a.slotMisuse(at, "not released by "+owner)
	a.release(at)
}

// keepSlot keeps at's slot taken after its owner ends, for why.
func (a *Agent) keepSlot(at *activeTurn, why string) {
	at.hold.keep()
	a.logger.Debug("turn slot kept", "request", at.requestID, "why", why)
}

// slotMisuse reports a turn slot released twice, or not released by its
// owner: a defect of this package, logged, and handed to the test hook.
func (a *Agent) slotMisuse(at *activeTurn, what string) {
	a.logger.Error("chat: turn slot misused", "request", at.requestID, "misuse", what)
	if a.onSlotMisuse != nil {
		a.onSlotMisuse(at.requestID, what)
	}
}
