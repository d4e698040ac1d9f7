package chat

import (
	"context"
	"fmt"
	"strings"
)

// AbandonTurn ends a turn whose fiber was abandoned (its recovery failed
// MaxAttempts times): the stream gets an error chunk unless it already
// ended, the partial answer is kept as the assistant message, and
// turn.failed is recorded. No stream is then left streaming with no owner,
// clients who reconnect see the error, and the agent takes new turns.
// fiberName is the abandoned fiber's name; other fibers are ignored.
func (a *Agent) AbandonTurn(ctx context.Context, fiberName string, cause error) error {
	requestID, ok := strings.CutPrefix(fiberName, TurnFiberPrefix)
	if !ok {
		return nil
	}
	if err := a.catchUp(ctx); err != nil {
		return err
	}
	info, err := a.store.Turn(a.agent, requestID)
	if err != nil || !info.Active() {
		return nil // no turn.started, or its outcome is recorded
	}
	b, err := loadStream(ctx, a.log, a.agent, info.StreamID)
	if err != nil {
		return fmt.Errorf("chat: abandon turn %s: read stream: %w", requestID, err)
	}
	st := &turnState{info: info, b: b}
	a.metrics.recoveries.WithLabelValues("abandon").Inc()
	msg := fmt.Sprintf("chat: turn %s abandoned: %v", requestID, cause)
	if b.terminal != "" {
		return a.recordFailed(ctx, st, msg)
	}
	em := a.newEmitter(info.StreamID, b)
	return a.failTurn(ctx, st, em, fmt.Errorf("%s", msg))
}
