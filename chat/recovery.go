package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/fiber"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/trace"
)

// Recovery describes a turn interrupted after it streamed something,
// handed to Config.OnChatRecovery.
type Recovery struct {
	StreamID  string
	RequestID string
	// MessageID is the id of the assistant message the turn writes.
	MessageID string
	// PartialText and PartialParts are what clients saw of the answer: the
	// stream's stored chunks (after the continued message's parts, for a
	// ContinueLastTurn).
	PartialText  string
	PartialParts []Part
	// RecoveryData is the turn fiber's last stash (JSON: streamId,
	// requestId, chunkIndex, responseId, sequenceNumber, attempts); nil if
	// it never stashed. ResponseID and SequenceNumber are its provider data.
	RecoveryData   json.RawMessage
	ResponseID     string
	SequenceNumber int64
	// Messages is the visible conversation (the partial answer not
	// included).
	Messages []Message
	// LastBody and LastTools are the request context of the turn.
	LastBody  json.RawMessage
	LastTools []llm.Tool
	// Attempt counts the recoveries of this turn since it last made
	// progress, from 1.
	Attempt int
}

// RecoveryDecision says what to do with an interrupted turn.
//
//   - {Persist: true, Continue: true} (the default): store the partial
//     answer as the assistant message, then continue it (ContinueLastTurn
//     semantics): the provider gets a Continuation, its output is appended to
//     the same message and streamed into the same stream.
//   - {Persist: true}: store the partial answer; the stream ends with abort.
//   - {Continue: true}: continue without storing the partial first; the
//     message is stored whole when the turn ends.
//   - {}: leave the history untouched (the hook handles it, for example by
//     retrieving the provider's stored response); the stream ends with abort.
//
// Whatever Persist says, a partial answer that holds settled tool results
// (a call's output, error or denial) is stored: those calls ran, and a
// conversation that forgot them would run them again (persistPartial).
type RecoveryDecision struct {
	Persist  bool
	Continue bool
}

// DefaultRecovery persists the partial answer and continues it.
func DefaultRecovery(context.Context, Recovery) (RecoveryDecision, error) {
	return RecoveryDecision{Persist: true, Continue: true}, nil
}

// OnFiberRecovered recovers a chat turn fiber (name TurnFiberPrefix +
// request id) and reports whether rec was one; other fibers are left to the
// caller. Call it from the fiber.Runner's Hooks.OnFiberRecovered:
//
//	handled, err := agent.OnFiberRecovered(ctx, rec)
//	if handled {
//		return err
//	}
//
// The turn resumes as the same fiber in the background (GoResume): its
// stream's stored chunks are read back; a turn whose stream already ended
// (crash after the terminal chunk) is only finalized; a turn that streamed
// nothing is retried into the same stream; otherwise OnChatRecovery decides.
// Each recovery without progress (new chunks) counts against
// MaxRecoveryAttempts; beyond it the turn fails with an error chunk and
// turn.failed. A set "turn" interrupt aborts the turn instead.
func (a *Agent) OnFiberRecovered(ctx context.Context, rec fiber.Recovered) (bool, error) {
	if strings.HasPrefix(rec.Name, QueueFiberPrefix) {
		return true, a.recoverQueued(ctx, rec)
	}
	requestID, ok := strings.CutPrefix(rec.Name, TurnFiberPrefix)
	if !ok {
		return false, nil
	}
	err := a.cfg.Fibers.GoResume(ctx, rec, func(fctx context.Context, f *fiber.Fiber) error {
		var span trace.Span
		err := a.endOnFailure(fctx, requestID, a.recoverTurn(fctx, f, requestID, rec, &span, nil))
		a.endTurnSpan(fctx, span, err)
		return a.afterTurn(fctx, requestID, err)
	}, fiber.Unique())
	if errors.Is(err, fiber.ErrNameTaken) {
		// One fiber per turn: a fiber of this turn runs here already, and
		// rec is a second one (its fiber.started landed after its command
		// gave up). Returning nil ends it; the turn is left to the other.
		return true, nil
	}
	return true, err
}

// persistPartial decides whether a recovered turn's partial answer is
// stored: when the decision says so, or when the partial holds settled
// tool results, which are stored whatever the decision.
func persistPartial(dec RecoveryDecision, partial []Part) bool {
	if dec.Persist {
		return true
	}
	for _, p := range partial {
		if p.Type == PartTool && (p.State == ToolOutput || p.State == ToolOutputError || p.State == ToolOutputDenied) {
			return true
		}
	}
	return false
}

// loadBase sets st.base to the parts the continued message had before the
// turn's stream: the stored message minus what the stream added (a
// recovered ContinueLastTurn may have persisted part of its stream).
func (st *turnRun) loadBase() error {
	a := st.a
	m, err := a.store.Message(a.agent, st.info.Continues)
	if err != nil {
		return err
	}
	st.base = m.Parts
	if pre, ok := baseParts(m.Parts, st.b.Parts()); ok {
		st.base = pre
	}
	return nil
}

// baseParts returns the prefix of stored that is not from streamed, when
// stored ends with (a merge of) streamed.
func baseParts(stored, streamed []Part) ([]Part, bool) {
	for k := len(stored); k >= 0; k-- {
		if equalParts(mergeParts(stored[:k], streamed), stored) {
			return stored[:k], true
		}
		// The streamed text may have been joined into the last base part.
		if k > 0 && len(streamed) > 0 && streamed[0].Type == PartText && stored[k-1].Type == PartText {
			last := stored[k-1]
			if t, ok := strings.CutSuffix(last.Text, streamed[0].Text); ok {
				pre := append(append([]Part(nil), stored[:k-1]...), Part{Type: PartText, Text: t})
				if equalParts(mergeParts(pre, streamed), stored) {
					return pre, true
				}
			}
		}
	}
	return stored, false
}

func withoutMessage(msgs []Message, id string) []Message {
	out := msgs[:0:0]
	for _, m := range msgs {
		if m.ID != id {
			out = append(out, m)
		}
	}
	return out
}

// ContinueLastTurn starts a turn that continues the last assistant message
// of the conversation: the provider gets a Continuation with the message's
// text, the output streams into a new stream whose start chunk carries the
// message's id, and it is appended to that message (message.updated). No
// user message is added. body replaces the stored request body when not
// nil.
//
// Errors: ErrNoAssistantMessage, ErrTurnActive, ErrInvalidMessage (body is
// not JSON), or a log error.
func (c *commands) ContinueLastTurn(ctx context.Context, body json.RawMessage) (Turn, error) {
	a := c.a
	if body != nil && !json.Valid(body) {
		return Turn{}, fmt.Errorf("%w: body is not JSON", ErrInvalidMessage)
	}
	if err := a.catchUp(ctx); err != nil {
		return Turn{}, err
	}
	history, err := a.store.History(a.agent)
	if err != nil {
		return Turn{}, err
	}
	var last *Message
	for i := len(history) - 1; i >= 0; i-- {
		if history[i].Role == RoleAssistant && !history[i].Hidden {
			last = &history[i]
			break
		}
	}
	if last == nil {
		return Turn{}, ErrNoAssistantMessage
	}
	t := turnStarted{RequestID: nuid.Next(), StreamID: nuid.Next(), AssistantMessageID: last.ID, Continues: last.ID, Body: body}
	if last.RequestID != "" {
		if prev, err := a.store.Turn(a.agent, last.RequestID); err == nil {
			if body == nil {
				t.Body = prev.Body
			}
			if t.Tools, err = storedTools(prev); err != nil {
				return Turn{}, err
			}
		}
	}
	return a.start(ctx, t, nil, last.Parts, "")
}
