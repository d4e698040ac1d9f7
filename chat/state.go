package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/forever-agents/forever/eventlog"
)

// Messages returns a page of the visible conversation; see Store.Messages.
func (c *commands) Messages(p Page) ([]Message, string, error) {
	return c.a.store.Messages(c.a.agent, p)
}

// Usage returns the agent's usage roll-up.
func (c *commands) Usage() (Usage, error) { return c.a.store.Usage(c.a.agent) }

// State returns the agent's state value and version (nil, 0 before the
// first SetState).
func (c *commands) State() (json.RawMessage, int, error) { return c.a.store.State(c.a.agent) }

// maxStateTries bounds SetState's retries when other events of the agent
// keep landing between its read and its append.
const maxStateTries = 16

// SetState replaces the agent's state with value if its version is
// expectVersion (0 before the first SetState) and returns the new version,
// expectVersion+1. The check is fenced by the log: state.set is appended
// with the agent's last event sequence expected, so of two concurrent
// SetState calls with the same expected version (in any processes) exactly
// one wins; the other returns ErrVersionConflict.
//
// Errors: ErrInvalidMessage (value is not JSON), ErrVersionConflict, or a
// log error.
func (c *commands) SetState(ctx context.Context, value json.RawMessage, expectVersion int) (int, error) {
	a := c.a
	if !json.Valid(value) {
		return 0, fmt.Errorf("%w: state is not JSON", ErrInvalidMessage)
	}
	a.stateMu.Lock()
	defer a.stateMu.Unlock()
	for range maxStateTries {
		last, err := a.log.LastSeq(ctx, eventlog.Filter{Agent: a.agent})
		if err != nil {
			return 0, err
		}
		if err := a.store.WaitFor(ctx, last); err != nil {
			return 0, err
		}
		_, ver, err := a.store.State(a.agent)
		if err != nil {
			return 0, err
		}
		if ver != expectVersion {
			return 0, fmt.Errorf("%w: version is %d, expected %d", ErrVersionConflict, ver, expectVersion)
		}
		e, err := eventlog.NewEvent(a.agent, EventStateSet, stateSet{Version: ver + 1, Value: value})
		if err != nil {
			return 0, err
		}
		seq, err := a.log.Append(ctx, e, eventlog.ExpectSeq(last))
		if errors.Is(err, eventlog.ErrConflict) {
			continue // another event of the agent came first: check again
		}
		if err != nil {
			return 0, fmt.Errorf("chat: append %s: %w", EventStateSet, err)
		}
		if a.cfg.OnState != nil {
			a.cfg.OnState(ctx, ver+1, value)
		}
		return ver + 1, a.store.WaitFor(ctx, seq)
	}
	return 0, fmt.Errorf("%w: the agent's events kept changing, try again", ErrVersionConflict)
}
