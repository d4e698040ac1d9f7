package chat

import (
	"context"
	"fmt"
)

// Truncate drops every message after afterID from the conversation ("" drops
// them all), for example to re-run a turn from an earlier point or to cut a
// history a recovery cannot use. It returns once the messages view shows it.
//
// Errors: ErrTurnActive while a turn runs or waits for recovery (its
// continuation depends on the history), ErrNotFound for an unknown afterID.
func (a *Agent) Truncate(ctx context.Context, afterID string) error {
	a.mu.Lock()
	busy := a.mu.active != nil
	a.mu.Unlock()
	if busy {
		return ErrTurnActive
	}
	if err := a.catchUp(ctx); err != nil {
		return err
	}
	if cur, active, err := a.store.ActiveTurn(a.agent); err != nil {
		return err
	} else if active {
		return fmt.Errorf("%w: turn %s waits for recovery", ErrTurnActive, cur.RequestID)
	}
	if afterID != "" {
		if _, err := a.store.Message(a.agent, afterID); err != nil {
			return fmt.Errorf("%w: message %s", ErrNotFound, afterID)
		}
	}
	_, err := a.append(ctx, EventMessagesTruncated, messagesTruncated{AfterID: afterID})
	return err
}
