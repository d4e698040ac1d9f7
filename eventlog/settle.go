package eventlog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/forever-agents/forever/internal/backoff"
)

// Appender appends events: *Log and *Writer, or a caller's wrapper of them.
type Appender interface {
	Append(ctx context.Context, e Event, opts ...AppendOpt) (Seq, error)
}

// Settle finds out where e was stored after an Append of it ended with
// its fate unknown (Unknown, or any error that is not a refusal): it
// appends e again, with the same ID, until JetStream answers. The answer is
// definite either way: stored (the first send, which the duplicate window
// drops the copy of, ErrDuplicate, or this one, which makes a late landing
// of the first a duplicate), or refused (not the owner, fenced, invalid).
// Under an Owner the copy is fenced like every append, so it never lands
// after another writer's events.
//
// e.ID must be the ID the first Append sent (set it before appending).
// The caller bounds ctx within the stream's duplicate window (Config.
// Duplicates, 2 minutes by default): past it a copy would be stored twice.
// When ctx ends first the fate is still unknown, and Settle returns an
// error wrapping ErrUnconfirmed.
func Settle(ctx context.Context, app Appender, e Event) (Seq, error) {
	if e.ID == "" {
		return 0, invalidf("settle %s for %q: the event has no id", e.Type, e.Agent)
	}
	for n := 0; ; n++ {
		seq, err := app.Append(ctx, e)
		switch {
		case err == nil, errors.Is(err, ErrDuplicate):
			return seq, nil
		case refused(err):
			return 0, err
		case ctx.Err() != nil:
			return 0, fmt.Errorf("%w: settle %s %s for %q: %w", ErrUnconfirmed, e.Type, e.ID, e.Agent, errors.Join(err, ctx.Err()))
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff.Exp(50*time.Millisecond, 2*time.Second, n)):
		}
	}
}

// refused reports whether an append's err is a definite answer that
// nothing of it was stored and sending it again cannot change that.
func refused(err error) bool {
	for _, target := range []error{ErrInvalid, ErrTooLarge, ErrNotOwner, ErrFenced, ErrRemoved, ErrClosed, ErrConflict} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
