package chat

import (
	"context"
	"fmt"
	"strconv"

	"github.com/forever-agents/forever/eventlog"
)

// Truncate drops every message after afterID from the conversation ("" drops
// them all), for example to re-run a turn from an earlier point or to cut a
// history a recovery cannot use. It returns once the messages view shows it.
//
// Errors: ErrTurnActive while a turn runs or waits for recovery (its
// continuation depends on the history), ErrNotFound for an unknown afterID.
func (c *commands) Truncate(ctx context.Context, afterID string) error {
	a := c.a
	_, err := a.truncate(ctx, afterID)
	return err
}

func (c *commands) truncate(ctx context.Context, afterID string) (eventlog.Seq, error) {
	a := c.a
	if err := a.settle(ctx); err != nil {
		return 0, err
	}
	a.mu.Lock()
	busy := a.mu.active != nil
	a.mu.Unlock()
	if busy {
		return 0, ErrTurnActive
	}
	if err := a.catchUp(ctx); err != nil {
		return 0, err
	}
	if cur, active, err := a.store.ActiveTurn(a.agent); err != nil {
		return 0, err
	} else if active {
		return 0, fmt.Errorf("%w: turn %s waits for recovery", ErrTurnActive, cur.RequestID)
	}
	if afterID != "" {
		if _, err := a.store.Message(a.agent, afterID); err != nil {
			return 0, fmt.Errorf("%w: message %s", ErrNotFound, afterID)
		}
	}
	return a.append(ctx, EventMessagesTruncated, messagesTruncated{AfterID: afterID})
}

// Rewrite replaces the conversation after afterID with a new turn: it
// truncates every message after afterID ("" = all), then sends req, whose
// message may have the id of a message the truncation removed (an edited
// message, or the user message of an answer made again). This is how an
// AI SDK client's edit and regenerate are stored. Each Rewrite is a new
// turn: a Rewrite sent again rewrites again.
//
// A crash between the two leaves the conversation truncated without the
// new turn, and every removed message is still in the log: sending req
// again (a Send, since its message is no longer stored) completes it.
//
// Errors: those of Truncate and of Send.
func (c *commands) Rewrite(ctx context.Context, afterID string, req SendRequest) (Turn, error) {
	a := c.a
	seq, err := a.truncate(ctx, afterID)
	if err != nil {
		return Turn{}, err
	}
	// The turn.started of a message sent before carries the same event id
	// (sendEventID): the truncation's sequence tells the two apart, so
	// JetStream's duplicate window does not drop the new one.
	req.rewrite = strconv.FormatUint(uint64(seq), 10)
	return a.Send(ctx, req)
}

// Conversation catches up with the log, once the turn whose stream has
// ended recorded its end, and returns the id of the last visible message
// ("" for none): what a request that rewrites the conversation compares
// itself with (Message and Messages read the rest).
func (c *commands) Conversation(ctx context.Context) (lastID string, err error) {
	a := c.a
	if err := a.settle(ctx); err != nil {
		return "", err
	}
	if err := a.catchUp(ctx); err != nil {
		return "", err
	}
	return a.store.LastMessageID(a.agent)
}

// Message returns one visible message of the conversation by id, or
// ErrNotFound.
func (c *commands) Message(id string) (Message, error) {
	a := c.a
	m, err := a.store.Message(a.agent, id)
	if err == nil && m.Hidden {
		return Message{}, fmt.Errorf("%w: message %q of agent %s", ErrNotFound, id, a.agent)
	}
	return m, err
}
