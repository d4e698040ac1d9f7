package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/forever-agents/forever/chat/chunk"
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

// recoverTurn resumes the turn's invoke_agent span into *span once it
// knows the turn. fail, when set, is why the turn's version policy fails
// it (OnFiberVersionFailed); rec.Restarted starts its answer again
// (restartAnswer).
func (a *Agent) recoverTurn(ctx context.Context, f *fiber.Fiber, requestID string, rec fiber.Recovered, span *trace.Span, fail error) error {
	if err := retryRead(ctx, a.logger, "catch up", func() error { return a.catchUp(ctx) }); err != nil {
		return err
	}
	info, err := a.store.Turn(a.agent, requestID)
	if errors.Is(err, ErrNotFound) {
		// The process died before turn.started: Send was not acknowledged.
		a.logger.Info("turn fiber without turn.started, ending it", "request", requestID)
		return nil
	}
	if err != nil {
		return err
	}
	ctx, *span = a.resumeTurnSpan(ctx, info, rec.Attempt)
	if !info.Active() {
		// Died after recording the outcome, before fiber.completed (and
		// before the span ended).
		(&turnState{span: *span}).noteOutcome(info.Status, info.FinishReason, nil, info.Error, false)
		return nil
	}
	if err := a.crashPoint(ctx, pointRecoverClaim); err != nil {
		return err
	}
	at, err := a.claim(ctx, requestID)
	if errors.Is(err, errRunsHere) {
		// One fiber per turn: this one is a second (its fiber.started
		// landed after its command gave up, and a copy of the command
		// started the turn's fiber); it ends without touching the turn.
		a.logger.Error("a second fiber of a running turn was recovered; it ends and leaves the turn to the fiber that runs it",
			"request", requestID, "fiber", rec.ID)
		return nil
	}
	if err != nil {
		return err
	}
	var b *builder
	err = retryRead(ctx, a.logger, "turn stream", func() (err error) {
		b, err = a.loadTurnStream(ctx, info)
		return err
	})
	if errors.Is(err, ErrChunksExpired) {
		defer a.release(at)
		return a.failExpired(ctx, &turnState{at: at, info: info, b: b, span: *span}, err)
	}
	if err != nil {
		a.release(at)
		return fmt.Errorf("chat: recover turn %s: read stream: %w", requestID, err)
	}
	st := &turnState{at: at, info: info, b: b, snap: snapshot{StreamID: info.StreamID, RequestID: requestID}, span: *span}
	if err := rec.Decode(&st.snap); err != nil && !errors.Is(err, fiber.ErrNoSnapshot) {
		a.logger.Warn("turn snapshot unreadable, recovering without it", "request", requestID, "err", err)
	}
	if info.Continues != "" && !resumesCalls(info) {
		if err := a.loadBase(st); err != nil {
			a.release(at)
			return err
		}
	}
	if b.terminal != "" {
		// The stream ended; only the records after it may be missing.
		a.metrics.recoveries.WithLabelValues("finalize").Inc()
		at.ended()
		defer a.release(at)
		switch b.terminal {
		case chunk.Finish:
			return a.recordCompleted(ctx, st, b.finish, b.usage)
		case chunk.Error:
			return a.recordFailed(ctx, st, b.errorText)
		default:
			return a.recordInterrupted(ctx, st, true, "cancelled")
		}
	}
	em := a.newEmitter(info.StreamID, b)
	tools, err := storedTools(info)
	if err != nil {
		// The same rule as a running turn: it cannot go on without them.
		defer a.release(at)
		return a.failTurn(ctx, st, em, err)
	}
	if fail != nil {
		a.metrics.recoveries.WithLabelValues("version_fail").Inc()
		defer a.release(at)
		return a.failTurn(ctx, st, em, fail)
	}
	// A turn awaiting its children, or parked at its soft budget limit,
	// was left by design (its agent was deactivated, or its process
	// stopped, while it waited): resuming it counts no attempt, and its
	// wait goes on without OnChatRecovery.
	parked := b.terminal == "" && a.parkedOnBudget(requestID)
	waiting := b.terminal == "" && (parked || a.awaitingChildren(requestID))
	if waiting {
		st.snap.Attempts = 0
	}
	if rec.Restarted && !waiting {
		// The restart policy: the answer starts again from the turn's
		// last message (a waiting turn's wait goes on: its children run).
		a.metrics.recoveries.WithLabelValues("version_restart").Inc()
		if err := a.restartAnswer(ctx, em, rec); err != nil {
			a.release(at)
			return err
		}
		st.snap = snapshot{StreamID: info.StreamID, RequestID: requestID}
	}
	if !waiting && st.countAttempt(b.chunks, a.cfg.MaxRecoveryAttempts, a.cfg.Clock.Now(), a.cfg.AttemptWindow) {
		defer a.release(at)
		return a.failTurn(ctx, st, em, fmt.Errorf("%w: turn %s was recovered %d times without progress", ErrRecoveryExhausted, requestID, a.cfg.MaxRecoveryAttempts))
	}
	// The attempt is durable before anything else happens, so a crash
	// during it counts.
	st.snap.ChunkIndex = b.chunks
	if err := a.stashSnap(ctx, f, st); err != nil {
		a.release(at)
		return err
	}
	if a.Interrupted(InterruptTurn) {
		defer a.release(at)
		return a.abortTurn(ctx, st, em, true, "cancelled")
	}
	if waiting {
		a.metrics.recoveries.WithLabelValues(map[bool]string{false: "children", true: "budget"}[parked]).Inc()
		st.resume = true
		return a.runTurn(ctx, f, st)
	}
	if !hasContent(b.Parts()) {
		// Nothing reached clients: run the turn again into the same stream.
		a.metrics.recoveries.WithLabelValues("retry").Inc()
		st.resume = st.snap.ResponseID != ""
		return a.runTurn(ctx, f, st)
	}
	msgs, _, err := a.store.Messages(a.agent, Page{})
	if err != nil {
		a.release(at)
		return err
	}
	if info.Continues != "" {
		msgs = withoutMessage(msgs, info.Continues)
	}
	dec, err := a.cfg.OnChatRecovery(ctx, Recovery{
		StreamID: info.StreamID, RequestID: requestID, MessageID: info.AssistantMessageID,
		PartialText: b.Text(), PartialParts: b.Parts(),
		RecoveryData: rec.Snapshot, ResponseID: st.snap.ResponseID, SequenceNumber: st.snap.SequenceNumber,
		Messages: msgs, LastBody: info.Body, LastTools: tools, Attempt: st.snap.Attempts,
	})
	if err != nil {
		defer a.release(at)
		return a.failTurn(ctx, st, em, fmt.Errorf("chat: recovery hook: %w", err))
	}
	persist := persistPartial(dec, b.Parts())
	if persist {
		if err := a.persist(ctx, st); err != nil {
			a.release(at)
			return err
		}
	}
	if !dec.Continue {
		if persist {
			a.metrics.recoveries.WithLabelValues("persist").Inc()
		} else {
			a.metrics.recoveries.WithLabelValues("discard").Inc()
		}
		defer a.release(at)
		return a.abortTurn(ctx, st, em, persist, "recovered without continuing")
	}
	a.metrics.recoveries.WithLabelValues("continue").Inc()
	st.resume = true
	return a.runTurn(ctx, f, st)
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
func (a *Agent) loadBase(st *turnState) error {
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
func (a *Agent) ContinueLastTurn(ctx context.Context, body json.RawMessage) (Turn, error) {
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
