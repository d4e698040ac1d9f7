package chat

import (
	"time"

	"github.com/forever-agents/forever/fiber"
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

// turnRun is one run of a turn: fresh (a Send's, started by its command's
// fiber, runStarted), retried or continued (a recovered fiber's,
// recoverTurn). It carries what the run needs besides its agent: the
// turn's fiber, stream writer, span and snapshot, and the hold of the
// agent's turn slot. The loop (runTurn, modelPhase, toolsPhase, stepDone)
// and the outcomes (completeTurn, failTurn, abortTurn and their record*
// steps) are its methods. A turn ended outside a run (endTurn: abandoned,
// orphaned, failed) is a turnRun without fiber or slot.
//
// The run owns its slot: it is released once, by release, which the code
// that runs the turn defers (turnRun.run, recoverTurn), or kept on purpose
// (keep). Nothing else of the run releases it.
type turnRun struct {
	a  *Agent
	f  *fiber.Fiber // the turn's fiber; nil for a turn ended outside one
	em *emitter     // the stream's writer: emitter makes it when first needed
	at *activeTurn  // the slot the run holds; nil when it holds none
	// modelWait (guarded by a.mu) is set while the run waits for
	// Config.Limiter (waitModel): Status shows it.
	modelWait *ModelWait
	info      TurnInfo
	b         *builder // what the stream shows so far
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

// hold makes at the run's slot: from here the run gives it back
// (release), and the agent finds the run through its slot (Status).
func (st *turnRun) hold(at *activeTurn) {
	st.a.mu.Lock()
	st.at, at.run = at, st
	st.a.mu.Unlock()
}

// release gives the run's slot back, unless the run kept it: the one place
// a run releases it. The code that runs the turn defers it, so it runs once,
// as the run's work ends, before the fiber ends a failed turn or tells a
// parent (endOnFailure, afterTurn). A run without a slot has nothing to
// release.
func (st *turnRun) release() {
	if st.at == nil || st.at.hold.kept() {
		return
	}
	st.a.release(st.at)
}

// keep keeps the run's slot taken after the run ends, for why.
func (st *turnRun) keep(why string) { st.a.keepSlot(st.at, why) }

// countAttempt counts a recovery attempt against the turn's budget, which
// progress (chunks written since the last attempt) resets; it reports
// whether the budget of max attempts is spent. An attempt without progress
// within window of the last counted one is that same attempt (a burst of
// restarts is one recovery); window 0 counts every attempt.
func (st *turnRun) countAttempt(chunks, max int, now time.Time, window time.Duration) (exhausted bool) {
	return st.snap.countAttempt(chunks, max, now, window)
}

// countAttempt is turnRun.countAttempt on the snapshot alone.
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

// emitter returns the writer of the turn's stream, after its stored
// chunks, made when first needed.
func (st *turnRun) emitter() *emitter {
	if st.em == nil {
		st.em = st.a.newEmitter(st.info.StreamID, st.b)
	}
	return st.em
}

// parts returns the assistant message as it stands.
func (st *turnRun) parts() []Part { return mergeParts(st.base, st.b.Parts()) }
