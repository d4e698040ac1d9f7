package chat

import (
	"context"
	"errors"
	"time"
)

// sendRollingBack stops the running turn, removes its messages from the
// conversation once it has ended (its user message and everything after
// it: its answer, messages steered into it), and then starts msg's turn.
// A turn that another command starts meanwhile is interrupted, not rolled
// back; a turn that ended on its own before the interrupt reached it (its
// finish was durable: a recovery completes such a turn from its stream)
// stays, as its clients saw it end.
func (c *commands) sendRollingBack(ctx context.Context, req SendRequest, msg Message) (Turn, error) {
	a := c.a
	a.mt.priority.Add(1)
	defer func() {
		a.mt.priority.Add(-1)
		a.mt.notify()
	}()
	deadline := time.Now().Add(interruptWait)
	var target string // the turn rolled back
	rolled := false
	cancelled := map[string]bool{}
	for {
		wake := a.mt.changed()
		if target != "" && !rolled {
			switch err := a.rollBack(ctx, target); {
			case err == nil:
				rolled = true
			case !errors.Is(err, ErrTurnActive):
				return Turn{}, err
			}
		}
		if target == "" || rolled {
			turn, err := a.sendNow(ctx, req, msg)
			if !errors.Is(err, ErrTurnActive) {
				return turn, err
			}
		}
		if time.Now().After(deadline) {
			return Turn{}, ErrTurnActive
		}
		if id, ok, err := a.activeRequest(ctx); err != nil {
			return Turn{}, err
		} else if ok && !cancelled[id] {
			cancelled[id] = true
			if target == "" {
				target = id
			}
			if _, err := a.Cancel(ctx); err != nil {
				return Turn{}, err
			}
		}
		select {
		case <-wake:
		case <-time.After(queuePoll):
		case <-ctx.Done():
			return Turn{}, ctx.Err()
		}
	}
}

// rollBack removes turn requestID's messages from the conversation: its
// user message and everything after it, or, for a turn without one (it
// resumed a message waiting for answers), its assistant message and
// everything after it. ErrTurnActive while the turn (or another) runs.
// Only a turn the interrupt stopped is removed: one that completed or
// failed on its own is left as it is.
func (c *commands) rollBack(ctx context.Context, requestID string) error {
	a := c.a
	if err := a.catchUp(ctx); err != nil {
		return err
	}
	info, err := a.store.Turn(a.agent, requestID)
	if err != nil {
		return err
	}
	if info.Active() {
		return ErrTurnActive
	}
	if info.Status != TurnInterrupted {
		return nil
	}
	history, err := a.store.History(a.agent)
	if err != nil {
		return err
	}
	for i, m := range history {
		if m.ID != info.MessageID && m.ID != info.AssistantMessageID {
			continue
		}
		after := ""
		if i > 0 {
			after = history[i-1].ID
		}
		return a.Truncate(ctx, after)
	}
	return nil // already gone
}
