package chat

import (
	"context"
	"fmt"
)

// SetInterrupt sets the agent's interrupt flag name (durable when it
// returns). The flag "turn" (InterruptTurn) stops the running turn: it is
// checked between deltas, before a turn streams and when a turn is
// recovered; the turn then ends with an abort chunk, its partial answer
// persisted, turn.interrupted, and the flag cleared. Other names are for the
// application.
func (c *commands) SetInterrupt(ctx context.Context, name string) error {
	a := c.a
	if name == "" {
		return fmt.Errorf("%w: empty interrupt name", ErrInvalidMessage)
	}
	if _, err := a.append(ctx, EventInterruptSet, interruptFlag{Name: name}); err != nil {
		return err
	}
	if name == InterruptTurn {
		a.cancelActive()
	}
	return nil
}

// ClearInterrupt clears the agent's interrupt flag name; clearing a flag not
// set appends nothing.
func (c *commands) ClearInterrupt(ctx context.Context, name string) error {
	a := c.a
	set, err := a.store.Interrupted(a.agent, name)
	if err != nil || !set {
		return err
	}
	_, err = a.append(ctx, EventInterruptCleared, interruptFlag{Name: name})
	return err
}

// Interrupted reports whether the agent's interrupt flag name is set, as of
// the store (which includes every SetInterrupt that returned). A store read
// error is logged and reported as not set.
func (c *commands) Interrupted(name string) bool {
	a := c.a
	set, err := a.store.Interrupted(a.agent, name)
	if err != nil {
		a.logger.Warn("read interrupt flag", "name", name, "err", err)
	}
	return set
}

// Cancel stops the agent's active turn and reports whether there was one.
// It sets the "turn" interrupt (durably, so a turn recovered in another
// process honours it too) and cancels the running turn's context in this
// process. The turn ends with an abort chunk, its partial answer persisted,
// and turn.interrupted.
func (c *commands) Cancel(ctx context.Context) (bool, error) {
	a := c.a
	a.mu.Lock()
	local := a.mu.active != nil
	a.mu.Unlock()
	if !local {
		if err := a.catchUp(ctx); err != nil {
			return false, err
		}
		if _, active, err := a.store.ActiveTurn(a.agent); err != nil || !active {
			return false, err
		}
	}
	if err := a.SetInterrupt(ctx, InterruptTurn); err != nil {
		return false, err
	}
	return true, nil
}

// cancelActive cancels the running turn, or marks the one about to run.
func (c *commands) cancelActive() {
	a := c.a
	a.mu.Lock()
	defer a.mu.Unlock()
	at := a.mu.active
	if at == nil {
		return
	}
	at.cancelled = true
	if at.cancel != nil {
		at.cancel(ErrCancelled)
	}
}

// CancelTurn is Cancel of the turn requestID only: it reports false, and
// does nothing, when another turn or none is active. A parent cancelling
// its sub-agent's turn uses it, so a persistent child that moved on to
// another turn is left alone.
func (c *commands) CancelTurn(ctx context.Context, requestID string) (bool, error) {
	a := c.a
	if err := a.catchUp(ctx); err != nil {
		return false, err
	}
	cur, active, err := a.store.ActiveTurn(a.agent)
	if err != nil || !active || cur.RequestID != requestID {
		return false, err
	}
	return a.Cancel(ctx)
}
