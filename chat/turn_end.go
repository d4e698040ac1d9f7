package chat

import (
	"context"
	"errors"
	"fmt"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

// appendEnd appends evs, a completed turn's last events (the assistant
// message, usage, turn.completed), and waits until the views show them.
// In the turn's own fiber, for a turn no parent waits on, the fiber's
// fiber.completed goes in the same chain (fiber.Complete): one awaited
// write where there were two, and nothing of the turn is written after
// it. A crash part way leaves a prefix stored, as before: without
// fiber.completed the fiber is recovered, finds the outcome recorded
// (recoverRecorded) or completes the rest. A sub-agent's turn notifies
// its parent after its outcome is stored (afterTurn), which a crash
// between the two must not lose, so its fiber ends when its function
// returns, as before.
func (a *Agent) appendEnd(ctx context.Context, st *turnState, evs []eventlog.Event) (eventlog.Seq, error) {
	f, ok := fiber.FromContext(ctx)
	if !ok || st.info.Parent != nil || f.Name() != TurnFiberPrefix+st.info.RequestID {
		return a.appendAll(ctx, evs)
	}
	seq, err := f.Complete(ctx, evs...)
	if errors.Is(err, eventlog.ErrTooLarge) {
		err = fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	if err != nil {
		return 0, fmt.Errorf("chat: append %s and %d more events with the fiber's end: %w", evs[0].Type, len(evs)-1, err)
	}
	if err := a.crashPoint(ctx, pointCompleted); err != nil {
		return 0, err
	}
	return seq, a.store.WaitFor(ctx, seq)
}

// pointCompleted is the crash point after a turn's last events and its
// fiber's fiber.completed are durable in one chain (appendEnd), before
// the views show them and the fiber's function returns.
const pointCompleted = "completed"
