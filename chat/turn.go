package chat

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/tracing"
)

// runTurn streams the provider's answer into the turn's stream and records
// the outcome. It returns nil when the outcome is recorded (completed,
// failed, interrupted), and an error only when the fiber should stay for
// recovery (shutdown) or the log failed. The run's slot is released by
// its caller, once runTurn returns.
func (st *turnRun) runTurn(fctx context.Context) (err error) {
	a := st.a
	ctx, cancel := context.WithCancelCause(fctx)
	defer cancel(nil)
	a.mu.Lock()
	st.at.cancel = cancel
	if st.at.cancelled {
		cancel(ErrCancelled)
	}
	a.mu.Unlock()

	// A new writer after the stored chunks, also after a recovery wrote
	// some (restartAnswer).
	st.em = a.newEmitter(st.info.StreamID, st.b)
	em := st.em
	defer func() {
		if err != nil {
			// Whatever was queued lands before anyone ends the turn after
			// the stored chunks (endOnFailure, recovery).
			_, _ = em.w.Flush(context.WithoutCancel(fctx))
		}
	}()
	// Chunks and events are written under fctx: a Cancel stops the
	// provider, not the writes that record the stop.
	if err := st.startStream(fctx); err != nil {
		return st.writeFailed(fctx, err)
	}
	tools, err := storedTools(st.info)
	if err != nil {
		return st.failTurn(fctx, err)
	}
	lp := a.newLoop(tools)
	if u := st.snap.StepUsage; u != nil && st.snap.Step == st.b.steps && len(st.b.stepCalls()) > 0 {
		// The current step's model call finished before the crash, and
		// its tool calls are stored (stashUsage).
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
			ph, err = st.modelPhase(ctx, fctx, lp, resume)
			resume = false
		case phaseTools:
			ph, err = st.toolsPhase(ctx, fctx, lp)
		case phaseStepDone:
			ph, err = st.stepDone(fctx, lp)
		case phaseClient:
			st.endStepUsage(lp, st.b.steps)
			return st.completeTurn(fctx, llm.FinishToolCalls, st.turnUsage())
		case phaseFinish:
			if st.steerAgain(fctx) {
				ph = phaseStepDone // messages steered in: one more step
				continue
			}
			reason := lp.reason
			if reason == "" {
				reason = llm.FinishStop
			}
			st.endStepUsage(lp, st.b.steps)
			return st.completeTurn(fctx, reason, st.turnUsage())
		}
		if err != nil {
			return st.stopped(ctx, fctx, err)
		}
	}
}

// stopped ends the run on err, the error that stopped its loop (ctx is the
// loop's context, fctx the fiber's): the turn is interrupted (a Cancel),
// failed, or left for recovery (shutdown, a log failure, the agent owned
// elsewhere).
func (st *turnRun) stopped(ctx, fctx context.Context, err error) error {
	var tf *turnFailure
	switch {
	case eventlog.OwnerLost(err):
		// Another node owns the agent now: write nothing more, not
		// even the failure. The fiber stays for the new owner.
		return err
	case errors.Is(err, ErrCancelled) || errors.Is(context.Cause(ctx), ErrCancelled):
		return st.abortTurn(fctx, true, "cancelled")
	case fctx.Err() != nil:
		// Shutdown: leave the fiber for recovery; what was written is
		// made durable on the way out.
		_, _ = st.em.w.Flush(context.WithoutCancel(fctx))
		return fctx.Err()
	case errors.Is(err, errWrite):
		return st.writeFailed(fctx, err)
	case errors.As(err, &tf):
		return st.failTurn(fctx, tf.err)
	default:
		return st.failTurn(fctx, err)
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
func (st *turnRun) continuation() *llm.Continuation {
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
func (st *turnRun) streamOnce(ctx, wctx context.Context, req llm.Request, usage *llm.Usage, last error) (reason string, err error) {
	a, em := st.a, st.emitter()
	if err := st.checkBudgetAtCall(ctx, wctx, *usage); err != nil {
		return "", err
	}
	limited, waited, err := st.waitModel(ctx, req, last)
	if err != nil {
		return "", err
	}
	ctx, call := st.startChatSpan(ctx, em.b.steps, req)
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
			if err := st.stash(wctx); err != nil {
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
func (st *turnRun) stash(ctx context.Context, opts ...fiber.StashOpt) error {
	em := st.emitter()
	if _, err := em.w.Flush(ctx); err != nil {
		return err
	}
	st.snap.ChunkIndex = em.b.chunks
	// The step's text now is exactly what the deltas up to SequenceNumber
	// made.
	_, current := st.split()
	st.snap.TextAtSequence = len(partsText(current))
	return st.stashSnap(ctx, opts...)
}

// stashUsage is stash for the snapshot that carries a step's usage
// before its tools run, with its two writes side by side, not one after
// the other: the chunks and the events are two streams, so the flush and
// the stash cost about one round trip, not two. Both are durable when it
// returns, so the tools still run only after their input is stored.
//
// The stash must then claim nothing of the chunks being flushed: it keeps
// the stream position of the last stash (ChunkIndex, TextAtSequence), and
// a crash between the two writes leaves either the chunks without the
// stash (as before any stash) or the stash without some of the chunks.
// A recovered turn counts StepUsage only while its stream holds the
// step's tool calls (runTurn); without them the step's model call is made
// again with the same idempotency key, as after a crash before the stash,
// and its usage is that call's. A provider that resumes a response by its
// id keeps stash's order: its SequenceNumber and TextAtSequence must
// match the stored text.
//
// With announce set (announcedCall), the stash also records that call's
// op.started (fiber.AnnounceStep): the call's step then writes none, and
// the tool runs after this one round of writes, not two.
func (st *turnRun) stashUsage(ctx context.Context, announce string) error {
	var opts []fiber.StashOpt
	if announce != "" {
		opts = append(opts, fiber.AnnounceStep(announce))
	}
	if llm.ResumesByID(st.a.cfg.Provider) {
		return st.stash(ctx, opts...)
	}
	em := st.emitter()
	flushed := make(chan error, 1)
	go func() {
		_, err := em.w.Flush(ctx)
		flushed <- err
	}()
	err := st.stashSnap(ctx, opts...)
	if err == nil {
		err = st.a.crashPoint(ctx, pointToolsStashed)
	}
	if ferr := <-flushed; err == nil {
		err = ferr
	}
	return err
}

// stashSnap stashes st.snap. Chunks stored since the last attempt are
// progress and reset the count; the fiber's attempt count is set to the
// turn's, so the fiber's cap (MaxAttempts) and MaxRecoveryAttempts count
// the same attempts and progress resets both.
func (st *turnRun) stashSnap(ctx context.Context, opts ...fiber.StashOpt) error {
	f := st.f
	if st.snap.ChunkIndex > st.snap.ChunksAtAttempt {
		st.snap.Attempts = 0
	}
	return f.Stash(ctx, st.snap, append([]fiber.StashOpt{fiber.WithAttempts(st.snap.Attempts)}, opts...)...)
}

// persist stores the assistant message as it stands: message.appended the
// first time, message.updated (replacing its parts) after that, so a
// recovered turn never duplicates the message. Either is split into
// message.part events when it does not fit one event.
func (st *turnRun) persist(ctx context.Context) error {
	a := st.a
	evs, err := st.persistEvents()
	if err != nil || len(evs) == 0 {
		return err
	}
	return a.appendMessageEvents(ctx, evs)
}

// persistEvents returns the events persist appends: none when the stored
// message already shows the answer, or when there is nothing to show.
func (st *turnRun) persistEvents() ([]eventlog.Event, error) {
	a := st.a
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
	return a.messageEvents(EventMessageAppended, id, st.assistantMessage())
}

// assistantMessage is the turn's assistant message as it stands.
func (st *turnRun) assistantMessage() Message {
	a := st.a
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
