package chat

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/tracing"
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
	a.metrics.recoveries.WithLabelValues("abandon").Inc()
	if a.tracer.On() {
		// No run will end the turn's span: this does, as failed.
		if info, err := a.store.Turn(a.agent, requestID); err == nil && info.Active() {
			var span trace.Span
			ctx, span = a.resumeTurnSpan(ctx, info, 0)
			defer func() {
				span.SetAttributes(tracing.TurnOutcome.String("abandoned"))
				failSpan(span, cause)
			}()
		}
	}
	return a.endTurn(ctx, requestID, fmt.Sprintf("chat: turn %s abandoned: %v", requestID, cause))
}

// endOnFailure ends the turn of a turn fiber that is about to fail with
// err, so no failure leaves a turn streaming with no owner: the turn gets
// an error chunk and turn.failed (endTurn), unless its outcome is recorded
// already. During shutdown (ctx done) the fiber stays for recovery and
// nothing is written. It returns err, joined with the failure to end the
// turn if any (the turns view then marks the turn orphaned when the fiber
// ends, and the next Send ends it).
//
// A failure of the log itself (fiber.LogFailed: an append JetStream could
// not take or confirm) does not end the turn either: the fiber is left for
// recovery, which continues the turn once the stream answers again. Nor
// does the loss of the agent (eventlog.OwnerLost): a node that is not the
// owner writes nothing, and the new owner's recovery ends the turn.
func (a *Agent) endOnFailure(ctx context.Context, requestID string, err error) error {
	if err == nil || ctx.Err() != nil || fiber.LogFailed(err) || eventlog.OwnerLost(err) {
		return err
	}
	msg := fmt.Sprintf("chat: turn %s failed: %v", requestID, err)
	if eerr := a.endTurn(context.WithoutCancel(ctx), requestID, msg); eerr != nil {
		return errors.Join(err, fmt.Errorf("chat: end failed turn %s: %w", requestID, eerr))
	}
	return err
}

// endTurn records a terminal failure with message msg for turn requestID
// if it is still active: an error chunk unless the stream already ended,
// the partial answer as the assistant message (unless too large), and
// turn.failed.
func (a *Agent) endTurn(ctx context.Context, requestID, msg string) error {
	if err := a.catchUp(ctx); err != nil {
		return err
	}
	info, err := a.store.Turn(a.agent, requestID)
	if err != nil || !info.Active() {
		return nil // no turn.started, or its outcome is recorded
	}
	b, err := a.loadTurnStream(ctx, info)
	if errors.Is(err, ErrChunksExpired) {
		return (&turnRun{a: a, info: info, b: b}).failExpired(ctx, fmt.Errorf("%s: %w", msg, err))
	}
	if err != nil {
		return fmt.Errorf("chat: end turn %s: read stream: %w", requestID, err)
	}
	st := &turnRun{a: a, info: info, b: b}
	if info.Continues != "" && !resumesCalls(info) {
		if err := st.loadBase(); err != nil {
			return err
		}
	}
	if b.terminal != "" {
		return st.recordFailed(ctx, msg)
	}
	return st.failTurn(ctx, errors.New(msg))
}
