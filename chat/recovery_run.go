package chat

import (
	"context"
	"errors"
	"fmt"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/fiber"
	"go.opentelemetry.io/otel/trace"
)

// turnRecovery carries out the recovery of one turn: gather reads what
// decideRecovery needs, and each action it returns is done here, by step
// (what a step learns goes into in, and decideRecovery is asked again) or
// by finish, which ends the recovery. The turn slot, once claimed, is held
// by the recovery's run (st), which releases it once, as recoverTurn
// returns: after finish, after the turn ran on (runTurn), or after a read
// or a step failed.
type turnRecovery struct {
	a         *Agent
	f         *fiber.Fiber
	rec       fiber.Recovered
	requestID string
	in        recoveryInput

	span  trace.Span
	st    *turnRun // the run: it holds the slot once claimed, and the stream once read
	tools []llm.Tool
}

// recoverTurn resumes the turn's invoke_agent span into *span once it
// knows the turn. fail, when set, is why the turn's version policy fails
// it (OnFiberVersionFailed); rec.Restarted starts its answer again
// (restartAnswer).
func (a *Agent) recoverTurn(ctx context.Context, f *fiber.Fiber, requestID string, rec fiber.Recovered, span *trace.Span, fail error) error {
	r := &turnRecovery{a: a, f: f, rec: rec, requestID: requestID, in: recoveryInput{
		fail: fail, restart: rec.Restarted,
		max: a.cfg.MaxRecoveryAttempts, window: a.cfg.AttemptWindow,
	}, st: &turnRun{a: a, f: f}}
	defer func() { a.checkSlot(r.st.at, "recovery") }()
	defer r.st.release() // the run's slot, once claimed
	ctx, err := r.gather(ctx, span)
	for err == nil {
		act := decideRecovery(r.in)
		if act.kind != recoverRestart && act.kind != recoverStash && act.kind != recoverAsk {
			return r.finish(ctx, act)
		}
		err = r.step(ctx, act)
	}
	return err
}

// gather reads the turn and, when it is active, claims its slot and reads
// its stream, snapshot and waits into r.in, and the slot and the stream
// into r.st. An error is a read that failed.
func (r *turnRecovery) gather(ctx context.Context, span *trace.Span) (context.Context, error) {
	a, requestID := r.a, r.requestID
	if err := retryRead(ctx, a.logger, "catch up", func() error { return a.catchUp(ctx) }); err != nil {
		return ctx, err
	}
	info, err := a.store.Turn(a.agent, requestID)
	if errors.Is(err, ErrNotFound) {
		return ctx, nil
	}
	if err != nil {
		return ctx, err
	}
	r.in.found, r.in.info = true, info
	ctx, *span = a.resumeTurnSpan(ctx, info, r.rec.Attempt)
	r.span, r.st.span = *span, *span
	if !info.Active() {
		return ctx, nil
	}
	if err := a.crashPoint(ctx, pointRecoverClaim); err != nil {
		return ctx, err
	}
	at, err := a.claim(ctx, requestID)
	if errors.Is(err, errRunsHere) {
		r.in.runsHere = true
		return ctx, nil
	}
	if err != nil {
		return ctx, err
	}
	st := r.st
	st.hold(at)
	var b *builder
	err = retryRead(ctx, a.logger, "turn stream", func() (err error) {
		b, err = a.loadTurnStream(ctx, info)
		return err
	})
	if errors.Is(err, ErrChunksExpired) {
		r.in.expired = err
		st.info, st.b = info, b
		return ctx, nil
	}
	if err != nil {
		return ctx, fmt.Errorf("chat: recover turn %s: read stream: %w", requestID, err)
	}
	st.info, st.b, st.snap = info, b, snapshot{StreamID: info.StreamID, RequestID: requestID}
	if err := r.rec.Decode(&st.snap); err != nil && !errors.Is(err, fiber.ErrNoSnapshot) {
		a.logger.Warn("turn snapshot unreadable, recovering without it", "request", requestID, "err", err)
	}
	if info.Continues != "" && !resumesCalls(info) {
		if err := st.loadBase(); err != nil {
			return ctx, err
		}
	}
	r.in.snap = st.snap
	r.observe()
	if b.terminal != "" {
		return ctx, nil
	}
	r.tools, r.in.toolsErr = storedTools(info)
	// A turn awaiting its children, or parked at its soft budget limit,
	// was left by design (its agent was deactivated, or its process
	// stopped, while it waited).
	r.in.parked = a.parkedOnBudget(requestID)
	r.in.children = !r.in.parked && a.awaitingChildren(requestID)
	r.in.now = a.cfg.Clock.Now()
	return ctx, nil
}

// observe reads what the stream shows into r.in.
func (r *turnRecovery) observe() {
	b := r.st.b
	r.in.terminal, r.in.chunks, r.in.parts = b.terminal, b.chunks, b.Parts()
}

// emitter returns the writer of the turn's stream, after its stored
// chunks.
func (r *turnRecovery) emitter() *emitter { return r.st.emitter() }

func (r *turnRecovery) count(act recoveryAction) {
	if act.metric != "" {
		r.a.metrics.recoveries.WithLabelValues(act.metric).Inc()
	}
}

// step carries out a step (recoverRestart, recoverStash, recoverAsk) and
// records what it learned in r.in.
func (r *turnRecovery) step(ctx context.Context, act recoveryAction) error {
	a, st := r.a, r.st
	r.count(act)
	switch act.kind {
	case recoverRestart:
		if err := a.restartAnswer(ctx, r.emitter(), r.rec); err != nil {
			return err
		}
		st.snap = snapshot{StreamID: st.info.StreamID, RequestID: st.info.RequestID}
		r.in.snap, r.in.restart = st.snap, false
		r.observe()
	case recoverStash:
		st.snap = act.snap
		if err := st.stashSnap(ctx); err != nil {
			return err
		}
		r.in.snap, r.in.stashed = st.snap, true
		r.in.interrupted = a.Interrupted(InterruptTurn)
	case recoverAsk:
		msgs, _, err := a.store.Messages(a.agent, Page{})
		if err != nil {
			return err
		}
		info := st.info
		if info.Continues != "" {
			msgs = withoutMessage(msgs, info.Continues)
		}
		dec, err := a.cfg.OnChatRecovery(ctx, Recovery{
			StreamID: info.StreamID, RequestID: info.RequestID, MessageID: info.AssistantMessageID,
			PartialText: st.b.Text(), PartialParts: st.b.Parts(),
			RecoveryData: r.rec.Snapshot, ResponseID: st.snap.ResponseID, SequenceNumber: st.snap.SequenceNumber,
			Messages: msgs, LastBody: info.Body, LastTools: r.tools, Attempt: st.snap.Attempts,
		})
		r.in.hook = &hookAnswer{dec: dec, err: err}
	default:
		return fmt.Errorf("chat: recover turn %s: %s is no step", r.requestID, act.kind)
	}
	return nil
}

// finish carries out an action that ends the recovery, the turn running on
// in it (runTurn) or ending. The run's slot, if claimed, is released once
// finish returns (recoverTurn).
func (r *turnRecovery) finish(ctx context.Context, act recoveryAction) error {
	a, st := r.a, r.st
	switch act.kind {
	case recoverNoTurn:
		a.logger.Info("turn fiber without turn.started, ending it", "request", r.requestID)
		return nil
	case recoverRecorded:
		// Died after recording the outcome, before fiber.completed (and
		// before the span ended).
		info := r.in.info
		r.st.noteOutcome(info.Status, info.FinishReason, nil, info.Error, false)
		return nil
	case recoverRunsHere:
		// One fiber per turn: this one is a second (its fiber.started
		// landed after its command gave up, and a copy of the command
		// started the turn's fiber); it ends without touching the turn.
		a.logger.Error("a second fiber of a running turn was recovered; it ends and leaves the turn to the fiber that runs it",
			"request", r.requestID, "fiber", r.rec.ID)
		return nil
	case recoverWait, recoverRetry, recoverContinue:
		if act.persist {
			if err := st.persist(ctx); err != nil {
				return err
			}
		}
		r.count(act)
		st.snap, st.resume = act.snap, act.resume
		return st.runTurn(ctx)
	}
	st.snap = act.snap
	switch act.kind {
	case recoverExpired:
		return st.failExpired(ctx, act.err)
	case recoverFinalize:
		r.count(act)
		st.at.ended()
		switch st.b.terminal {
		case chunk.Finish:
			return st.recordCompleted(ctx, st.b.finish, st.b.usage)
		case chunk.Error:
			return st.recordFailed(ctx, st.b.errorText)
		default:
			return st.recordInterrupted(ctx, true, "cancelled")
		}
	case recoverToolsCorrupt, recoverVersionFail, recoverExhausted, recoverHookFailed:
		r.count(act)
		return st.failTurn(ctx, act.err)
	case recoverInterrupted:
		return st.abortTurn(ctx, true, "cancelled")
	case recoverAbort:
		if act.persist {
			if err := st.persist(ctx); err != nil {
				return err
			}
		}
		r.count(act)
		return st.abortTurn(ctx, act.persist, "recovered without continuing")
	}
	return fmt.Errorf("chat: recover turn %s: unknown action %s", r.requestID, act.kind)
}
