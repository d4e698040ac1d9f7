package chat

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/tracing"
	"go.opentelemetry.io/otel/trace"
)

// snapshot is what a turn fiber stashes: where its stream is and what the
// provider needs to continue, plus the recovery budget.
type snapshot struct {
	StreamID       string `json:"streamId"`
	RequestID      string `json:"requestId"`
	ChunkIndex     int    `json:"chunkIndex"`
	ResponseID     string `json:"responseId,omitempty"`
	SequenceNumber int64  `json:"sequenceNumber,omitempty"`
	// TextAtSequence is the length of the answer's text when SequenceNumber
	// was the last delta: chunks stored after the stash are not sent twice
	// by a provider resuming after SequenceNumber.
	TextAtSequence int `json:"textAtSequence,omitempty"`
	// Attempts counts recoveries and retries since the turn last made
	// progress; ChunksAtAttempt is the stored chunk count at the last one.
	Attempts        int `json:"attempts,omitempty"`
	ChunksAtAttempt int `json:"chunksAtAttempt,omitempty"`
	// AttemptAt is when the last attempt was counted: recoveries without
	// progress within Config.AttemptWindow of it count as that attempt.
	AttemptAt time.Time `json:"attemptAt,omitzero"`
	// Step is the current step, from 1: the number of start-step chunks
	// written. Steps holds the usage of the steps completed before it.
	Step  int         `json:"step,omitempty"`
	Steps []stepUsage `json:"steps,omitempty"`
	// StepUsage is the usage the current step's model call reported, once
	// it finished: stashed before the step's tools run, so a turn
	// recovered during them still counts the call.
	StepUsage *stepUsage `json:"stepUsage,omitempty"`
	// Steered are the ids of the messages steered into the turn that a
	// model call has read (steer.go).
	Steered []string `json:"steered,omitempty"`
}

// turnState is one run of a turn: fresh, retried or continued.
type turnState struct {
	at   *activeTurn
	info TurnInfo
	b    *builder // what the stream shows so far
	// base is the part of the assistant message before this stream: the
	// continued message of a ContinueLastTurn, nil otherwise.
	base []Part
	snap snapshot
	// resume: continue the answer after what b (and base) hold.
	resume bool
	// span is the turn's invoke_agent span in this run; nil outside a run
	// (a turn ended by another path).
	span trace.Span
	// failCode is the code turn.failed records (budget.go), 0 for none.
	failCode int
	// stashedStep is the step whose snapshot after it its tool call's
	// completion recorded (toolsPhase), 0 for none: stepDone stashes it
	// no more.
	stashedStep int
}

// countAttempt counts a recovery attempt against the turn's budget, which
// progress (chunks written since the last attempt) resets; it reports
// whether the budget of max attempts is spent. An attempt without progress
// within window of the last counted one is that same attempt (a burst of
// restarts is one recovery); window 0 counts every attempt.
func (st *turnState) countAttempt(chunks, max int, now time.Time, window time.Duration) (exhausted bool) {
	return st.snap.countAttempt(chunks, max, now, window)
}

// countAttempt is turnState.countAttempt on the snapshot alone.
func (s *snapshot) countAttempt(chunks, max int, now time.Time, window time.Duration) (exhausted bool) {
	if chunks > s.ChunksAtAttempt {
		s.Attempts = 0
	}
	s.ChunksAtAttempt = chunks
	if since := now.Sub(s.AttemptAt); s.Attempts > 0 && window > 0 &&
		!s.AttemptAt.IsZero() && since >= 0 && since < window {
		return s.Attempts > max
	}
	s.Attempts++
	s.AttemptAt = now
	return s.Attempts > max
}

// parts returns the assistant message as it stands.
func (st *turnState) parts() []Part { return mergeParts(st.base, st.b.Parts()) }

// runTurn streams the provider's answer into the turn's stream and records
// the outcome. It returns nil when the outcome is recorded (completed,
// failed, interrupted), and an error only when the fiber should stay for
// recovery (shutdown) or the log failed.
func (a *Agent) runTurn(fctx context.Context, f *fiber.Fiber, st *turnState) (err error) {
	defer a.release(st.at)
	ctx, cancel := context.WithCancelCause(fctx)
	defer cancel(nil)
	a.mu.Lock()
	st.at.cancel = cancel
	if st.at.cancelled {
		cancel(ErrCancelled)
	}
	a.mu.Unlock()

	em := a.newEmitter(st.info.StreamID, st.b)
	defer func() {
		if err != nil {
			// Whatever was queued lands before anyone ends the turn after
			// the stored chunks (endOnFailure, recovery).
			_, _ = em.w.Flush(context.WithoutCancel(fctx))
		}
	}()
	// Chunks and events are written under fctx: a Cancel stops the
	// provider, not the writes that record the stop.
	if err := a.startStream(fctx, st, em); err != nil {
		return a.writeFailed(fctx, st, em, err)
	}
	tools, err := storedTools(st.info)
	if err != nil {
		return a.failTurn(fctx, st, em, err)
	}
	lp := a.newLoop(tools)
	if u := st.snap.StepUsage; u != nil && st.snap.Step == st.b.steps {
		// The current step's model call finished before the crash.
		lp.usage = llm.Usage{InputTokens: u.Input, OutputTokens: u.Output}
	}
	ph, resume := phaseModel, st.resume || len(st.base) > 0
	if st.resume || resumesCalls(st.info) {
		ph = resumePhase(st.b)
		a.logger.Debug("turn resumed", "request", st.info.RequestID, "step", st.b.steps, "phase", ph)
	}
	for {
		if ph == phaseModel {
			a.metrics.steps.Inc()
		}
		switch ph {
		case phaseModel:
			ph, err = a.modelPhase(ctx, fctx, f, em, st, lp, resume)
			resume = false
		case phaseTools:
			ph, err = a.toolsPhase(ctx, fctx, f, em, st, lp)
		case phaseStepDone:
			ph, err = a.stepDone(fctx, f, em, st, lp)
		case phaseClient:
			st.endStepUsage(lp, st.b.steps)
			return a.completeTurn(fctx, st, em, llm.FinishToolCalls, st.turnUsage())
		case phaseFinish:
			if a.steerAgain(fctx, st) {
				ph = phaseStepDone // messages steered in: one more step
				continue
			}
			reason := lp.reason
			if reason == "" {
				reason = llm.FinishStop
			}
			st.endStepUsage(lp, st.b.steps)
			return a.completeTurn(fctx, st, em, reason, st.turnUsage())
		}
		if err == nil {
			continue
		}
		var tf *turnFailure
		switch {
		case eventlog.OwnerLost(err):
			// Another node owns the agent now: write nothing more, not
			// even the failure. The fiber stays for the new owner.
			return err
		case errors.Is(err, ErrCancelled) || errors.Is(context.Cause(ctx), ErrCancelled):
			return a.abortTurn(fctx, st, em, true, "cancelled")
		case fctx.Err() != nil:
			// Shutdown: leave the fiber for recovery; what was written is
			// made durable on the way out.
			_, _ = em.w.Flush(context.WithoutCancel(fctx))
			return fctx.Err()
		case errors.Is(err, errWrite):
			return a.writeFailed(fctx, st, em, err)
		case errors.As(err, &tf):
			return a.failTurn(fctx, st, em, tf.err)
		default:
			return a.failTurn(fctx, st, em, err)
		}
	}
}

// IdempotencyKey is the Idempotency-Key of the provider call a turn makes
// when its stream holds chunks chunks: a hash of the request id and that
// step. A call retried with nothing new in the stream (a retryable error, a
// crash before anything was stored) is the same request and carries the same
// key, so a provider that honours the header does not bill it twice; a call
// continuing after more chunks is a different request and gets a new key.
func IdempotencyKey(requestID string, chunks int) string {
	h := sha256.Sum256([]byte(requestID + "\x00llm\x00" + strconv.Itoa(chunks)))
	return hex.EncodeToString(h[:16])
}

// errWrite marks a failure to write the stream (the log, not the model).
var errWrite = errors.New("chat: stream write failed")

// continuation is what the provider needs to continue st's answer: the
// current step's text (earlier steps reach it as messages).
func (a *Agent) continuation(st *turnState) *llm.Continuation {
	_, current := st.split()
	c := &llm.Continuation{PartialText: partsText(current), ResponseID: st.snap.ResponseID,
		SequenceNumber: st.snap.SequenceNumber, TextAtSequence: st.snap.TextAtSequence}
	if c.PartialText == "" && c.ResponseID == "" {
		return nil
	}
	return c
}

// streamOnce runs one provider call. It returns the finish reason, or the
// error that ended the call: the provider's, ctx's cause, or an errWrite.
func (a *Agent) streamOnce(ctx, wctx context.Context, f *fiber.Fiber, em *emitter, st *turnState, req llm.Request, usage *llm.Usage, last error) (reason string, err error) {
	if err := a.checkBudgetAtCall(ctx, wctx, f, em, st, *usage); err != nil {
		return "", err
	}
	limited, waited, err := a.waitModel(ctx, req, last)
	if err != nil {
		return "", err
	}
	ctx, call := a.startChatSpan(ctx, st, em.b.steps, req)
	if a.cfg.Limiter != nil {
		call.span.SetAttributes(tracing.ModelLimiterWait.Float64(waited.Seconds()))
	}
	var callUsage *llm.Usage
	defer func() {
		var u llm.Usage
		if callUsage != nil {
			u = *callUsage
		}
		limited(u, err)
		call.end(reason, callUsage, st.snap.ResponseID, err)
	}()
	lastStash, chunksAtStash := a.cfg.Clock.Now(), em.b.chunks
	req.IdempotencyKey = IdempotencyKey(st.info.RequestID, em.b.chunks)
	for d, err := range a.cfg.Provider.Stream(ctx, req) {
		if err != nil {
			if ctx.Err() != nil {
				return "", context.Cause(ctx)
			}
			return "", err
		}
		// A new response id is stashed at once only for a provider that
		// resumes by it; for the others it goes with the next stash.
		newID := d.ResponseID != "" && d.ResponseID != st.snap.ResponseID && llm.ResumesByID(a.cfg.Provider)
		if d.ResponseID != "" {
			st.snap.ResponseID = d.ResponseID
		}
		if d.SequenceNumber != 0 {
			st.snap.SequenceNumber = d.SequenceNumber
		}
		if d.Kind == llm.Finish {
			if d.Usage != nil {
				usage.InputTokens += d.Usage.InputTokens
				usage.OutputTokens += d.Usage.OutputTokens
				callUsage = d.Usage
			}
			return d.FinishReason, nil
		}
		call.delta(d)
		if err := em.delta(wctx, d); err != nil {
			if wctx.Err() != nil {
				return "", wctx.Err()
			}
			return "", fmt.Errorf("%w: %w", errWrite, err)
		}
		if ctx.Err() != nil {
			return "", context.Cause(ctx)
		}
		if a.Interrupted(InterruptTurn) {
			return "", ErrCancelled
		}
		if newID || em.b.chunks-chunksAtStash >= a.cfg.StashChunks || a.cfg.Clock.Now().Sub(lastStash) >= a.cfg.StashInterval {
			if err := a.stash(wctx, f, em, st); err != nil {
				return "", fmt.Errorf("%w: %w", errWrite, err)
			}
			lastStash, chunksAtStash = a.cfg.Clock.Now(), em.b.chunks
		}
	}
	if ctx.Err() != nil {
		return "", context.Cause(ctx)
	}
	return "", &llm.Error{Provider: a.cfg.Provider.Name(), Retryable: true, Err: llm.ErrStreamCut}
}

// stash makes the chunks written so far durable, then stashes the turn's
// snapshot, so the snapshot never claims more than the stream holds.
func (a *Agent) stash(ctx context.Context, f *fiber.Fiber, em *emitter, st *turnState) error {
	if _, err := em.w.Flush(ctx); err != nil {
		return err
	}
	st.snap.ChunkIndex = em.b.chunks
	// The step's text now is exactly what the deltas up to SequenceNumber
	// made.
	_, current := st.split()
	st.snap.TextAtSequence = len(partsText(current))
	return a.stashSnap(ctx, f, st)
}

// stashSnap stashes st.snap. Chunks stored since the last attempt are
// progress and reset the count; the fiber's attempt count is set to the
// turn's, so the fiber's cap (MaxAttempts) and MaxRecoveryAttempts count
// the same attempts and progress resets both.
func (a *Agent) stashSnap(ctx context.Context, f *fiber.Fiber, st *turnState) error {
	if st.snap.ChunkIndex > st.snap.ChunksAtAttempt {
		st.snap.Attempts = 0
	}
	return f.Stash(ctx, st.snap, fiber.WithAttempts(st.snap.Attempts))
}

// persist stores the assistant message as it stands: message.appended the
// first time, message.updated (replacing its parts) after that, so a
// recovered turn never duplicates the message. Either is split into
// message.part events when it does not fit one event.
func (a *Agent) persist(ctx context.Context, st *turnState) error {
	evs, err := a.persistEvents(st)
	if err != nil || len(evs) == 0 {
		return err
	}
	return a.appendMessageEvents(ctx, evs)
}

// persistEvents returns the events persist appends: none when the stored
// message already shows the answer, or when there is nothing to show.
func (a *Agent) persistEvents(st *turnState) ([]eventlog.Event, error) {
	parts := st.parts()
	id := st.info.AssistantMessageID
	if old, err := a.store.Message(a.agent, id); err == nil {
		if equalParts(old.Parts, parts) {
			return nil, nil
		}
		return a.messageEvents(EventMessageUpdated, id, messageUpdated{ID: id, Parts: parts})
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	if !hasContent(parts) {
		return nil, nil
	}
	return a.messageEvents(EventMessageAppended, id, a.assistantMessage(st))
}

// assistantMessage is the turn's assistant message as it stands.
func (a *Agent) assistantMessage(st *turnState) Message {
	return Message{
		ID: st.info.AssistantMessageID, Role: RoleAssistant, Parts: st.parts(),
		RequestID: st.info.RequestID, CreatedAt: a.cfg.Clock.Now().UTC(),
	}
}

func equalParts(a, b []Part) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// completeTurn ends the stream with finish and records the message, the
// usage and turn.completed, in that order.
func (a *Agent) completeTurn(ctx context.Context, st *turnState, em *emitter, reason string, usage llm.Usage) error {
	// An answer too large to store (over MaxMessageParts events) is
	// refused before the stream claims success: clients see an error chunk
	// saying so.
	if _, err := a.messageEvents(EventMessageAppended, st.info.AssistantMessageID, a.assistantMessage(st)); err != nil {
		return a.failTurn(ctx, st, em, fmt.Errorf("chat: the answer cannot be stored: %w", err))
	}
	if err := em.finish(ctx, reason, usage); err != nil {
		return a.writeFailed(ctx, st, em, err)
	}
	if _, err := em.w.Flush(ctx); err != nil {
		return a.writeFailed(ctx, st, em, err)
	}
	st.at.ended()
	if err := a.crashPoint(ctx, pointEnded); err != nil {
		return err
	}
	return a.recordCompleted(ctx, st, reason, &usage)
}

// recordCompleted appends what follows a stored finish chunk; usage is nil
// when unknown (a finish chunk stored without it). The message, usage and
// turn.completed go in one chain (eventlog.Log.AppendAll): one round trip
// and one wait for the views, not three. A crash may leave a prefix of
// them stored, as it could when they went one by one: each is idempotent,
// and a recovery finds what is stored and completes the rest.
func (a *Agent) recordCompleted(ctx context.Context, st *turnState, reason string, usage *llm.Usage) error {
	evs, err := a.persistEvents(st)
	if err != nil {
		return err
	}
	if usage != nil {
		rec := usageRecorded{RequestID: st.info.RequestID, Input: usage.InputTokens, Output: usage.OutputTokens}
		if len(st.snap.Steps) > 1 {
			rec.Steps = st.snap.Steps
		}
		sub, err := a.subagentUsage(st.info.RequestID)
		if err != nil {
			return err
		}
		rec.Subagents = sub
		rec.Cost = a.costOf(*usage)
		e, err := a.event(EventUsageRecorded, rec)
		if err != nil {
			return fmt.Errorf("chat: append %s: %w", EventUsageRecorded, err)
		}
		evs = append(evs, e)
	}
	e, err := a.event(EventTurnCompleted, turnEnded{RequestID: st.info.RequestID, FinishReason: reason})
	if err != nil {
		return fmt.Errorf("chat: append %s: %w", EventTurnCompleted, err)
	}
	if _, err := a.appendAll(ctx, append(evs, e)); err != nil {
		return err
	}
	if usage != nil {
		a.metrics.tokens.WithLabelValues("input").Add(float64(usage.InputTokens))
		a.metrics.tokens.WithLabelValues("output").Add(float64(usage.OutputTokens))
		a.noteCost(st, *usage)
	}
	outcome := "completed"
	if reason == llm.FinishToolCalls {
		outcome = "waiting" // for an approval or a client tool's result
	}
	st.noteOutcome(outcome, reason, usage, "", a.cfg.TraceContent)
	a.metrics.turns.WithLabelValues("completed").Inc()
	return nil
}

// startStream writes the stream's start chunk unless it has one: a turn
// recovery fails or aborts may have died before writing it, and a stream
// starts with it however it ends (verify's stream-start rule).
func (a *Agent) startStream(ctx context.Context, st *turnState, em *emitter) error {
	if st.b.started {
		return nil
	}
	return em.emit(ctx, chunk.Chunk{Type: chunk.Start, MessageID: st.info.AssistantMessageID, RequestID: st.info.RequestID})
}

// failTurn records a terminal failure: an error chunk clients see, the
// partial answer (if any) as the assistant message, and turn.failed.
func (a *Agent) failTurn(ctx context.Context, st *turnState, em *emitter, cause error) error {
	a.logger.Warn("turn failed", "request", st.info.RequestID, "err", cause)
	if err := a.startStream(ctx, st, em); err != nil {
		return a.writeFailed(ctx, st, em, err)
	}
	if err := a.nameLinked(ctx, st, em); err != nil {
		return a.writeFailed(ctx, st, em, err)
	}
	if err := em.emit(ctx, chunk.Chunk{Type: chunk.Error, ErrorText: cause.Error()}); err != nil {
		return a.writeFailed(ctx, st, em, err)
	}
	if _, err := em.w.Flush(ctx); err != nil {
		return a.writeFailed(ctx, st, em, err)
	}
	st.at.ended()
	return a.recordFailed(ctx, st, cause.Error())
}

func (a *Agent) recordFailed(ctx context.Context, st *turnState, msg string) error {
	if err := a.endChildren(ctx, st); err != nil {
		return err
	}
	if err := a.persist(ctx, st); errors.Is(err, ErrTooLarge) {
		// The partial answer cannot be stored; the failure still is.
		a.logger.Warn("partial answer of a failed turn not stored", "request", st.info.RequestID, "err", err)
	} else if err != nil {
		return err
	}
	if _, err := a.append(ctx, EventTurnFailed, turnEnded{RequestID: st.info.RequestID, Error: msg, Code: st.failCode}); err != nil {
		return err
	}
	st.noteOutcome("failed", "", nil, msg, a.cfg.TraceContent)
	a.metrics.turns.WithLabelValues("failed").Inc()
	return nil
}

// abortTurn ends the stream with abort, persists the partial answer when
// persist is set, records turn.interrupted and clears the "turn" interrupt.
func (a *Agent) abortTurn(ctx context.Context, st *turnState, em *emitter, persist bool, reason string) error {
	if err := a.startStream(ctx, st, em); err != nil {
		return a.writeFailed(ctx, st, em, err)
	}
	if err := a.nameLinked(ctx, st, em); err != nil {
		return a.writeFailed(ctx, st, em, err)
	}
	if err := em.emit(ctx, chunk.Chunk{Type: chunk.Abort}); err != nil {
		return a.writeFailed(ctx, st, em, err)
	}
	if _, err := em.w.Flush(ctx); err != nil {
		return a.writeFailed(ctx, st, em, err)
	}
	st.at.ended()
	return a.recordInterrupted(ctx, st, persist, reason)
}

func (a *Agent) recordInterrupted(ctx context.Context, st *turnState, persist bool, reason string) error {
	if err := a.endChildren(ctx, st); err != nil {
		return err
	}
	if persist {
		if err := a.persist(ctx, st); err != nil {
			return err
		}
	}
	if _, err := a.append(ctx, EventTurnInterrupted, turnEnded{RequestID: st.info.RequestID, Reason: reason}); err != nil {
		return err
	}
	st.noteOutcome("interrupted", "", nil, "", a.cfg.TraceContent)
	a.metrics.turns.WithLabelValues("interrupted").Inc()
	return a.ClearInterrupt(ctx, InterruptTurn)
}

// writeFailed handles a stream that cannot be written. During shutdown,
// and when the log itself failed (fiber.LogFailed: JetStream did not take
// or confirm the chunk, as while the chunks stream elects a leader),
// nothing is recorded and the fiber stays for recovery, which continues the
// turn into the same stream once it answers (each recovery without progress
// counts against MaxRecoveryAttempts). Recording the turn failed there
// would leave its stream without a terminal chunk, since that write fails
// too, and every replay client of it waiting for good. The same holds when
// this process no longer owns the agent (eventlog.OwnerLost): it writes
// nothing more, and the new owner's recovery decides the turn's outcome.
// Any other failure is returned and recorded by no one here: a turn's
// outcome is recorded only after its terminal chunk, so that every failed
// turn ends its stream once. The fiber's endOnFailure ends the turn from
// the log: it rebuilds the stream's writer from the stored stream (this
// one may be broken) and writes the error chunk, then turn.failed. A
// stream that lost its chunks under the turn (eventlog.ErrRemoved) is ended
// the same way, with an error chunk the stream still takes (failExpired).
func (a *Agent) writeFailed(ctx context.Context, st *turnState, em *emitter, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if !fiber.LogFailed(err) && !eventlog.OwnerLost(err) && !errors.Is(err, eventlog.ErrRemoved) {
		a.logger.Warn("turn's stream not written; the turn is ended from the log", "request", st.info.RequestID, "err", err)
	}
	return err
}

// storedTools decodes the tools a turn was started with. Tools that do not
// decode are corrupt stored data, and every path that needs them follows one
// rule (see the package doc): running or recovering the turn fails it, and
// ContinueLastTurn refuses, with this error, which matches
// eventlog.ErrCorrupt. A turn never runs on without its tools.
func storedTools(info TurnInfo) ([]llm.Tool, error) {
	if len(info.Tools) == 0 {
		return nil, nil
	}
	var tools []llm.Tool
	if err := json.Unmarshal(info.Tools, &tools); err != nil {
		return nil, &eventlog.CorruptError{What: fmt.Sprintf("tools of turn %s", info.RequestID), Err: err}
	}
	return tools, nil
}
