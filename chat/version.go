package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/fiber"
)

// FiberVersionPolicy returns the version policy of the agent's fibers
// named name, "" for the agent type's (fiber.Config.VersionPolicyOf): a
// queued message is always continued, since no version has started
// answering it yet and its fiber's snapshot is the message itself.
func (a *Agent) FiberVersionPolicy(name string) fiber.VersionPolicy {
	if strings.HasPrefix(name, QueueFiberPrefix) {
		return fiber.VersionContinue
	}
	return ""
}

// OnFiberVersionFailed ends a turn its agent type's version policy fails
// (fiber.Hooks.OnVersionFailed) and reports whether rec was a turn's
// fiber: the turn resumes as its fiber to end its stream with an error
// chunk naming the versions, and turn.failed records the same sentence.
// A turn whose stream already ended is only finalized, as any recovery
// does.
func (a *Agent) OnFiberVersionFailed(ctx context.Context, rec fiber.Recovered, cause error) (bool, error) {
	requestID, ok := strings.CutPrefix(rec.Name, TurnFiberPrefix)
	if !ok {
		return false, nil
	}
	var verr *fiber.VersionError
	if errors.As(cause, &verr) {
		cause = &VersionError{RequestID: requestID, From: verr.From, To: verr.To, Err: verr}
	}
	err := a.cfg.Fibers.GoResume(ctx, rec, func(fctx context.Context, f *fiber.Fiber) error {
		var span trace.Span
		err := a.endOnFailure(fctx, requestID, a.recoverTurn(fctx, f, requestID, rec, &span, cause))
		a.endTurnSpan(fctx, span, err)
		return a.afterTurn(fctx, requestID, err)
	}, fiber.Unique())
	if errors.Is(err, fiber.ErrNameTaken) {
		return true, nil // the turn is left to the fiber that runs it
	}
	return true, err
}

// VersionError is the failure of a turn that a version of its agent
// recovered under the fail policy, another version having started it:
// its text is the error chunk's and turn.failed's. It matches
// fiber.ErrVersionChanged with errors.Is.
type VersionError struct {
	RequestID string
	From, To  string
	Err       error
}

func (e *VersionError) Error() string {
	var verr *fiber.VersionError
	if errors.As(e.Err, &verr) && verr.Err != nil {
		return fmt.Sprintf("chat: turn %s was started by version %q of the agent and cannot go on under version %q: %v", e.RequestID, e.From, e.To, verr.Err)
	}
	return fmt.Sprintf("chat: turn %s was started by version %q of the agent and cannot go on under version %q (its version policy is fail); send the message again", e.RequestID, e.From, e.To)
}

// Unwrap returns the fiber's *fiber.VersionError.
func (e *VersionError) Unwrap() error { return e.Err }

// restartAnswer starts the answer of a turn that the restart policy
// recovered again: the open blocks and step are closed and a
// data-restart chunk tells clients to drop what they saw, after which the
// stream's message is empty (the builder drops it too) and the turn runs
// again from its last message. A crash after it restarts nothing twice:
// the stream then shows no content.
func (a *Agent) restartAnswer(ctx context.Context, em *emitter, rec fiber.Recovered) error {
	if !hasContent(em.b.Parts()) {
		return nil
	}
	if err := em.closeBlocks(ctx); err != nil {
		return err
	}
	if em.b.stepOpen {
		if err := em.emit(ctx, chunk.Chunk{Type: chunk.FinishStep}); err != nil {
			return err
		}
	}
	data, err := json.Marshal(map[string]string{"from": rec.From, "to": a.cfg.Fibers.Version()})
	if err != nil {
		return err
	}
	if err := em.emit(ctx, chunk.Chunk{Type: chunk.Restart, Data: data}); err != nil {
		return err
	}
	_, err = em.w.Flush(ctx)
	return err
}
