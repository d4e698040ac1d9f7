package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

// completeTurn ends the stream with finish and records the message, the
// usage and turn.completed, in that order.
func (st *turnRun) completeTurn(ctx context.Context, reason string, usage llm.Usage) error {
	a, em := st.a, st.emitter()
	// An answer too large to store (over MaxMessageParts events) is
	// refused before the stream claims success: clients see an error chunk
	// saying so.
	if _, err := a.messageEvents(EventMessageAppended, st.info.AssistantMessageID, st.assistantMessage()); err != nil {
		return st.failTurn(ctx, fmt.Errorf("chat: the answer cannot be stored: %w", err))
	}
	// Ending before the finish chunk is written: a client sees the chunk
	// as soon as it is durable, before Flush returns here, and may send
	// its next message at once (st.at.ended).
	st.at.ended()
	if err := a.crashPoint(ctx, pointEnding); err != nil {
		return err
	}
	if err := em.finish(ctx, reason, usage); err != nil {
		return st.writeFailed(ctx, err)
	}
	if _, err := em.w.Flush(ctx); err != nil {
		return st.writeFailed(ctx, err)
	}
	if err := a.crashPoint(ctx, pointEnded); err != nil {
		return err
	}
	return st.recordCompleted(ctx, reason, &usage)
}

// recordCompleted appends what follows a stored finish chunk; usage is nil
// when unknown (a finish chunk stored without it). The message, usage and
// turn.completed go in one chain (eventlog.Log.AppendAll), with the turn
// fiber's fiber.completed where appendEnd says: one round trip and one
// wait for the views, not three. A crash may leave a prefix of
// them stored, as it could when they went one by one: each is idempotent,
// and a recovery finds what is stored and completes the rest. At record
// format 8 (Config.EndRecordsWritable) the message and usage ride in
// turn.completed itself (endRecord): the chain is two records, and a
// prefix of it is nothing or the whole outcome.
func (st *turnRun) recordCompleted(ctx context.Context, reason string, usage *llm.Usage) error {
	a := st.a
	evs, err := st.persistEvents()
	if err != nil {
		return err
	}
	end := endRecord{RequestID: st.info.RequestID, FinishReason: reason}
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
		end.Usage = &rec
	}
	var e eventlog.Event
	if a.endRecordsWritable() {
		evs, e, err = a.foldEnd(evs, end)
	} else {
		evs, e, err = a.chainEnd(evs, end)
	}
	if err != nil {
		return err
	}
	if _, err := st.appendEnd(ctx, append(evs, e)); err != nil {
		return err
	}
	if usage != nil {
		a.metrics.tokens.WithLabelValues("input").Add(float64(usage.InputTokens))
		a.metrics.tokens.WithLabelValues("output").Add(float64(usage.OutputTokens))
		st.noteCost(*usage)
	}
	outcome := "completed"
	if reason == llm.FinishToolCalls {
		outcome = "waiting" // for an approval or a client tool's result
	}
	st.noteOutcome(outcome, reason, usage, "", a.cfg.TraceContent)
	a.metrics.turns.WithLabelValues("completed").Inc()
	return nil
}

// endRecord is what recordCompleted writes as turn.completed: turnEnded's
// requestId and finishReason and, at record format 8
// (Config.EndRecordsWritable), the turn's assistant message (the exact
// bytes its message.appended would have held) and its usage, which every
// view reads from here as from a message.appended and a usage.recorded
// before it (SplitEnd), so the turn's end stores two records (this and
// fiber.completed) where it stored four. Each is absent when it went in a
// record of its own: always before format 8; at it, a message stored in
// parts or updated (message.part, message.updated), one that does not fit
// beside the usage, and a message already stored by a turn recovered part
// way.
type endRecord struct {
	RequestID    string          `json:"requestId"`
	FinishReason string          `json:"finishReason,omitempty"`
	Message      json.RawMessage `json:"message,omitempty"`
	Usage        *usageRecorded  `json:"usage,omitempty"`
}

// endRecordsWritable reports whether a turn may store its message and
// usage in its turn.completed (Config.EndRecordsWritable).
func (a *Agent) endRecordsWritable() bool {
	return a.cfg.EndRecordsWritable != nil && a.cfg.EndRecordsWritable()
}

// chainEnd returns the records of a turn's end before record format 8:
// evs (the message's), a usage.recorded, and turn.completed as e.
func (a *Agent) chainEnd(evs []eventlog.Event, end endRecord) ([]eventlog.Event, eventlog.Event, error) {
	if end.Usage != nil {
		u, err := a.event(EventUsageRecorded, *end.Usage)
		if err != nil {
			return nil, u, fmt.Errorf("chat: append %s: %w", EventUsageRecorded, err)
		}
		evs = append(evs, u)
	}
	e, err := a.event(EventTurnCompleted, endRecord{RequestID: end.RequestID, FinishReason: end.FinishReason})
	if err != nil {
		return nil, e, fmt.Errorf("chat: append %s: %w", EventTurnCompleted, err)
	}
	return evs, e, nil
}

// foldEnd returns the records of a turn's end at record format 8:
// turn.completed as e, carrying the usage and, when evs is the one
// message.appended of the answer, the message (evs then empty). A message
// in parts or an update (message.part, message.updated) stays in evs,
// before e; so does a message that fits one event but not beside the
// usage.
func (a *Agent) foldEnd(evs []eventlog.Event, end endRecord) ([]eventlog.Event, eventlog.Event, error) {
	if len(evs) == 1 && evs[0].Type == EventMessageAppended {
		with := end
		with.Message = evs[0].Data
		if e, err := a.event(EventTurnCompleted, with); err == nil {
			return nil, e, nil
		} else if !errors.Is(err, ErrTooLarge) {
			return nil, e, fmt.Errorf("chat: append %s: %w", EventTurnCompleted, err)
		}
	}
	e, err := a.event(EventTurnCompleted, end)
	if err != nil {
		return nil, e, fmt.Errorf("chat: append %s: %w", EventTurnCompleted, err)
	}
	return evs, e, nil
}

// startStream writes the stream's start chunk unless it has one: a turn
// recovery fails or aborts may have died before writing it, and a stream
// starts with it however it ends (verify's stream-start rule).
func (st *turnRun) startStream(ctx context.Context) error {
	if st.b.started {
		return nil
	}
	return st.emitter().emit(ctx, chunk.Chunk{Type: chunk.Start, MessageID: st.info.AssistantMessageID, RequestID: st.info.RequestID})
}

// failTurn records a terminal failure: an error chunk clients see, the
// partial answer (if any) as the assistant message, and turn.failed.
func (st *turnRun) failTurn(ctx context.Context, cause error) error {
	a, em := st.a, st.emitter()
	a.logger.Warn("turn failed", "request", st.info.RequestID, "err", cause)
	if err := st.startStream(ctx); err != nil {
		return st.writeFailed(ctx, err)
	}
	if err := st.nameLinked(ctx); err != nil {
		return st.writeFailed(ctx, err)
	}
	st.at.ended() // before the terminal chunk, as in completeTurn
	if err := em.emit(ctx, chunk.Chunk{Type: chunk.Error, ErrorText: cause.Error()}); err != nil {
		return st.writeFailed(ctx, err)
	}
	if _, err := em.w.Flush(ctx); err != nil {
		return st.writeFailed(ctx, err)
	}
	return st.recordFailed(ctx, cause.Error())
}

func (st *turnRun) recordFailed(ctx context.Context, msg string) error {
	a := st.a
	if err := st.endChildren(ctx); err != nil {
		return err
	}
	if err := st.persist(ctx); errors.Is(err, ErrTooLarge) {
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
func (st *turnRun) abortTurn(ctx context.Context, persist bool, reason string) error {
	em := st.emitter()
	if err := st.startStream(ctx); err != nil {
		return st.writeFailed(ctx, err)
	}
	if err := st.nameLinked(ctx); err != nil {
		return st.writeFailed(ctx, err)
	}
	st.at.ended() // before the terminal chunk, as in completeTurn
	if err := em.emit(ctx, chunk.Chunk{Type: chunk.Abort}); err != nil {
		return st.writeFailed(ctx, err)
	}
	if _, err := em.w.Flush(ctx); err != nil {
		return st.writeFailed(ctx, err)
	}
	return st.recordInterrupted(ctx, persist, reason)
}

func (st *turnRun) recordInterrupted(ctx context.Context, persist bool, reason string) error {
	a := st.a
	if err := st.endChildren(ctx); err != nil {
		return err
	}
	if persist {
		if err := st.persist(ctx); err != nil {
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
func (st *turnRun) writeFailed(ctx context.Context, err error) error {
	a := st.a
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

// appendEnd appends evs, a completed turn's last events (the assistant
// message, usage, turn.completed), and waits until the views show them.
// In the turn's own fiber, for a turn no parent waits on, the fiber's
// fiber.completed goes in the same chain (fiber.Complete): one awaited
// write where there were two; from record format 11
// (Config.InlineEndsWritable) the fiber's end rides in the chain's last
// record (fiber.CompleteIn), one record fewer, and a crash can no
// longer come between the turn's outcome and its fiber's end. Nothing
// of the turn is written after
// it. A crash part way leaves a prefix stored, as before: without
// fiber.completed the fiber is recovered, finds the outcome recorded
// (recoverRecorded) or completes the rest. A sub-agent's turn notifies
// its parent after its outcome is stored (afterTurn), which a crash
// between the two must not lose, so its fiber ends when its function
// returns, as before.
func (st *turnRun) appendEnd(ctx context.Context, evs []eventlog.Event) (eventlog.Seq, error) {
	a := st.a
	f, ok := fiber.FromContext(ctx)
	if !ok || st.info.Parent != nil || f.Name() != TurnFiberPrefix+st.info.RequestID {
		return a.appendAll(ctx, evs)
	}
	complete := f.Complete
	if a.cfg.InlineEndsWritable != nil && a.cfg.InlineEndsWritable() {
		complete = f.CompleteIn
	}
	seq, err := complete(ctx, evs...)
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

// SplitEnd returns e as the records of the turn it stands for before
// record format 8: a turn.completed that carries its turn's assistant
// message or usage (endRecord) as the message.appended and usage.recorded
// that would have come before it, then the turn.completed without them,
// each with e's agent, sequence and time; any other event alone. The
// fiber's end a turn.completed carries from record format 11 is not the
// turn's: it is left out (fiber.Records reads it). For readers of the log
// alone (package chatreplay) that compare turns stored at any of these
// formats.
func SplitEnd(e eventlog.Event) []eventlog.Event {
	e.Completes = ""
	if e.Type != EventTurnCompleted {
		return []eventlog.Event{e}
	}
	var end endRecord
	if json.Unmarshal(e.Data, &end) != nil || (end.Message == nil && end.Usage == nil) {
		return []eventlog.Event{e}
	}
	out := make([]eventlog.Event, 0, 3)
	as := func(typ string, data []byte) eventlog.Event {
		x := e
		x.Type, x.Data = typ, data
		return x
	}
	if end.Message != nil {
		out = append(out, as(EventMessageAppended, end.Message))
	}
	if end.Usage != nil {
		if data, err := json.Marshal(end.Usage); err == nil {
			out = append(out, as(EventUsageRecorded, data))
		}
	}
	if data, err := json.Marshal(endRecord{RequestID: end.RequestID, FinishReason: end.FinishReason}); err == nil {
		out = append(out, as(EventTurnCompleted, data))
	}
	return out
}
