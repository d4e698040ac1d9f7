package chat

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
)

// DefaultMaxSteps caps the steps (model calls) of one turn.
const DefaultMaxSteps = 20

// FinishStepLimit is the finish reason turn.completed records for a turn
// ended by Config.MaxSteps; its finish chunk says "tool-calls", the last
// step's reason, as the AI SDK's own step limit does.
const FinishStepLimit = "step-limit"

// phase is where a turn stands in its current step. A turn is a sequence of
// steps, each one model call (framed by start-step and finish-step) and the
// server tool calls it made. Every phase is a point a crash can leave the
// turn at, and resumePhase finds it again from the stream alone.
type phase uint8

const (
	// phaseModel calls the model for the current step: a new step, a step
	// that streamed nothing yet (retried), or one whose text is continued.
	phaseModel phase = iota + 1
	// phaseTools: the model's part of the step is over and it made tool
	// calls without outputs; the server's are run (completed ones return
	// their recorded result, never running twice).
	phaseTools
	// phaseStepDone: every call of the step has its output; the step is
	// closed and the next one begins, unless the step limit is reached.
	phaseStepDone
	// phaseFinish: the model answered without tool calls; the turn ends
	// with finish.
	phaseFinish
	// phaseClient: calls remain that the server does not run (client
	// tools); the turn ends with finish "tool-calls" for the client to
	// answer them.
	phaseClient
)

var phaseNames = [...]string{phaseModel: "model", phaseTools: "tools", phaseStepDone: "step-done", phaseFinish: "finish", phaseClient: "client"}

func (p phase) String() string {
	if int(p) < len(phaseNames) && phaseNames[p] != "" {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", p)
}

// resumePhase is the phase of a turn resumed from its stored stream b (not
// ended). The stream is the truth: what clients saw is what the turn did.
//
//   - An open step (or none yet) that holds tool calls: the model's output
//     for the step stands as stored, and its calls are run (phaseTools). A
//     call whose input was cut off gets an error output.
//   - An open step without calls: its text is continued, or the step
//     retried when it streamed nothing (phaseModel).
//   - A closed step whose calls all have outputs: the next step
//     (phaseStepDone); with calls still pending: phaseTools.
//   - A closed step without calls: the model had answered (phaseFinish).
func resumePhase(b *builder) phase {
	calls := b.stepCalls()
	switch {
	case b.stepOpen || b.steps == 0:
		if len(calls) > 0 {
			return phaseTools
		}
		return phaseModel
	case len(calls) == 0:
		return phaseFinish
	case len(pendingCalls(calls)) > 0:
		return phaseTools
	default:
		return phaseStepDone
	}
}

// afterModel is the phase after the model finished the current step: a
// step with tool calls goes on to run them (calls that already failed,
// such as input that is not JSON, go back to the model too).
func afterModel(b *builder) phase {
	if len(b.stepCalls()) > 0 {
		return phaseTools
	}
	return phaseFinish
}

// pendingCalls returns the calls without an output (or error) yet.
func pendingCalls(calls []Part) []Part {
	var out []Part
	for _, c := range calls {
		switch c.State {
		case ToolInputStreaming, ToolInputAvailable, ToolApprovalRequested, ToolApprovalResponded, "":
			out = append(out, c)
		}
	}
	return out
}

// stepUsage is the usage of one step, as the turn snapshot keeps it.
type stepUsage struct {
	Input  int64 `json:"input"`
	Output int64 `json:"output"`
}

// loop is the state a turn carries from step to step within one run.
type loop struct {
	tools  []llm.Tool // what the model is offered: server tools, then the turn's client tools
	client map[string]bool
	usage  llm.Usage // of the current step
	reason string    // the model's finish reason for the current step
}

// newLoop offers the model the agent's server tools and the turn's client
// tools; a client tool named like a server tool is the server's.
func (a *Agent) newLoop(clientTools []llm.Tool) *loop {
	lp := &loop{tools: a.cfg.Tools.Defs(), client: map[string]bool{}}
	for _, t := range clientTools {
		if _, ok := a.cfg.Tools.Lookup(t.Name); ok {
			continue
		}
		lp.tools = append(lp.tools, t)
		lp.client[t.Name] = true
	}
	return lp
}

// endStepUsage records the current step's usage in the snapshot (once per
// step) and starts the next step's count.
func (st *turnRun) endStepUsage(lp *loop, steps int) {
	if steps > len(st.snap.Steps) {
		st.snap.Steps = append(st.snap.Steps, stepUsage{Input: lp.usage.InputTokens, Output: lp.usage.OutputTokens})
	}
	lp.usage = llm.Usage{}
	st.snap.StepUsage = nil
}

// afterStep returns the snapshot stepDone stashes when the current step
// (steps) ends with the stream at chunks, every one of them stored: the
// step's usage added (endStepUsage), its provider data cleared. st.snap is
// left as it is.
func (st *turnRun) afterStep(lp *loop, steps, chunks int) *snapshot {
	s := st.snap
	s.Steps, s.Steered = slices.Clone(st.snap.Steps), slices.Clone(st.snap.Steered)
	if steps > len(s.Steps) {
		s.Steps = append(s.Steps, stepUsage{Input: lp.usage.InputTokens, Output: lp.usage.OutputTokens})
	}
	s.StepUsage = nil
	s.ResponseID, s.SequenceNumber = "", 0
	_, current := st.split()
	s.ChunkIndex, s.TextAtSequence = chunks, len(partsText(current))
	if s.ChunkIndex > s.ChunksAtAttempt {
		s.Attempts = 0 // progress, as stashSnap counts it
	}
	return &s
}

// turnUsage is the turn's usage: the sum of its steps'.
func (st *turnRun) turnUsage() llm.Usage {
	var u llm.Usage
	for _, s := range st.snap.Steps {
		u.InputTokens += s.Input
		u.OutputTokens += s.Output
	}
	return u
}

// request is the model call for the current step: the conversation, the
// turn's earlier steps as an assistant message with their tool calls and
// results, and, when resuming, a continuation of the current step's text.
func (st *turnRun) request(lp *loop, history []Message, resume bool) llm.Request {
	a := st.a
	msgs := make([]Message, 0, len(history)+1)
	for _, m := range history {
		if m.ID != st.info.AssistantMessageID {
			msgs = append(msgs, m)
		}
	}
	msgs, steered := steeredLast(st, msgs, resume)
	earlier, _ := st.split()
	if len(earlier) > 0 {
		msgs = append(msgs, Message{Role: RoleAssistant, Parts: earlier})
	}
	msgs = append(msgs, steered...)
	req := llm.Request{Model: a.cfg.Model, System: a.cfg.System, Messages: toLLM(msgs), Tools: lp.tools}
	if resume {
		req.Continue = st.continuation()
	}
	return req
}

// split returns the assistant message as it stands in two: the steps
// before the current one, and the current step. A continued message's base
// belongs to the stream's first step.
func (st *turnRun) split() (earlier, current []Part) {
	if st.b.steps <= 1 {
		return nil, st.parts()
	}
	e, c := st.b.stepParts()
	return mergeParts(st.base, e), c
}

// modelPhase runs the model for the current step, retrying (continuing)
// after retryable provider errors within the turn's attempt budget.
func (st *turnRun) modelPhase(ctx, fctx context.Context, lp *loop, resume bool) (phase, error) {
	a, em := st.a, st.emitter()
	history, err := a.store.historyShared(a.agent) // only read
	if err != nil {
		return 0, err
	}
	if !em.b.stepOpen {
		if err := em.emit(fctx, chunk.Chunk{Type: chunk.StartStep}); err != nil {
			return 0, fmt.Errorf("%w: %w", errWrite, err)
		}
		st.snap.Step = em.b.steps
	}
	history, system, err := st.modelInput(ctx, lp, history)
	if err != nil {
		return 0, err
	}
	req := st.request(lp, history, resume)
	req.System = system
	var last error // the step's previous call's
	for {
		if a.Interrupted(InterruptTurn) {
			return 0, ErrCancelled
		}
		reason, err := st.streamOnce(ctx, fctx, req, &lp.usage, last)
		last = err
		if err == nil {
			lp.reason = reason
			next := afterModel(em.b)
			if next == phaseTools {
				// The call's usage is durable before its tools run: a
				// turn recovered during them counts it (the stream's
				// finish chunk carries it on the other paths).
				st.snap.StepUsage = &stepUsage{Input: lp.usage.InputTokens, Output: lp.usage.OutputTokens}
				if err := st.stashUsage(fctx, st.announcedCall()); err != nil {
					return 0, fmt.Errorf("%w: %w", errWrite, err)
				}
			}
			return next, nil
		}
		if errors.Is(err, ErrCancelled) || errors.Is(context.Cause(ctx), ErrCancelled) || fctx.Err() != nil ||
			errors.Is(err, errWrite) || !llm.IsRetryable(err) {
			return 0, err
		}
		if a.cfg.Limiter != nil && llm.RateLimited(err) {
			// The provider is over its limit: the limiter holds every
			// tenant's calls for its Retry-After, this turn's next one
			// among them. Not the turn's failure: no attempt counted.
			a.logger.Info("model rate limited, the turn waits for the limiter", "request", st.info.RequestID, "step", st.snap.Step, "retry_after", llm.RetryAfterOf(err), "err", err)
			if err := st.stash(fctx); err != nil {
				return 0, fmt.Errorf("%w: %w", errWrite, err)
			}
			req.Continue = st.continuation()
			continue
		}
		if st.countAttempt(em.b.chunks, a.cfg.MaxRecoveryAttempts, a.cfg.Clock.Now(), 0) {
			return 0, &turnFailure{fmt.Errorf("%w (%d without progress): %w", ErrRecoveryExhausted, a.cfg.MaxRecoveryAttempts, err)}
		}
		a.logger.Warn("retryable provider error, continuing the step", "request", st.info.RequestID, "step", st.snap.Step, "attempt", st.snap.Attempts, "err", err)
		if err := st.stash(fctx); err != nil {
			return 0, fmt.Errorf("%w: %w", errWrite, err)
		}
		// At least what the provider asked for (its Retry-After).
		select {
		case <-a.cfg.Clock.After(max(a.cfg.RetryBackoff<<min(st.snap.Attempts-1, 6), llm.RetryAfterOf(err))):
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
		req.Continue = st.continuation()
	}
}

// stepDone closes the current step, records its usage in the snapshot and
// begins the next one, or ends the turn at the step limit.
func (st *turnRun) stepDone(fctx context.Context, lp *loop) (phase, error) {
	a, em := st.a, st.emitter()
	if err := a.crashPoint(fctx, pointStepDone); err != nil {
		return 0, err
	}
	if em.b.stepOpen {
		if err := em.closeBlocks(fctx); err != nil {
			return 0, fmt.Errorf("%w: %w", errWrite, err)
		}
		if err := em.emit(fctx, chunk.Chunk{Type: chunk.FinishStep}); err != nil {
			return 0, fmt.Errorf("%w: %w", errWrite, err)
		}
	}
	st.endStepUsage(lp, em.b.steps)
	if em.b.steps >= a.cfg.MaxSteps {
		lp.reason = FinishStepLimit
		return phaseFinish, nil
	}
	// The next step's provider data starts afresh.
	st.snap.ResponseID, st.snap.SequenceNumber, st.snap.TextAtSequence = "", 0, 0
	if st.stashedStep == em.b.steps {
		// The step's one tool call recorded this snapshot with its
		// result (toolsPhase); the chunks since go with the next stash.
		return phaseModel, nil
	}
	if err := st.stash(fctx); err != nil {
		return 0, fmt.Errorf("%w: %w", errWrite, err)
	}
	return phaseModel, nil
}

// turnFailure is a terminal failure of the turn (not of the log): it ends
// with an error chunk and turn.failed.
type turnFailure struct{ err error }

func (e *turnFailure) Error() string { return e.err.Error() }
func (e *turnFailure) Unwrap() error { return e.err }

// Crash points of a step that tests stop a turn at, as a process dying
// there would (the model streaming and a tool running need none: a test
// provider or tool blocks there).
const (
	pointToolsStashed = "tools-stashed" // the step's usage is stashed, its tool calls' chunks may not be stored (stashUsage)
	pointToolsBegin   = "tools-begin"   // tool-input-available is stored, no tool has run
	pointToolRecorded = "tool-recorded" // a tool's result is recorded, its output chunk not written
	pointStepDone     = "step-done"     // every output is written, the next call not made
	pointEnding       = "ending"        // the turn is about to write its finish chunk
	pointEnded        = "ended"         // the finish chunk is durable, the turn's records not appended

	// Points of a command that starts a turn (Send, Answer,
	// ContinueLastTurn), called with the command's ctx.
	pointSendBegin      = "send-begin"       // the command holds the turn slot, nothing is appended
	pointSendChecked    = "send-checked"     // caught up with the log and checked (not a copy, no turn active), nothing appended
	pointSendTurnStored = "send-turn-stored" // turn.started (with the user message) is durable, Send has not returned
	pointSendStored     = "send-stored"      // every append is durable, the command not acknowledged, the turn not running

	// A recovered turn about to take the agent's turn slot.
	pointRecoverClaim = "recover-claim"

	// Points of a sub-agent call.
	pointChildStarted = "child-started" // the child's turn is started, the link not recorded
	pointChildLinked  = "child-linked"  // the link is recorded, the child not named in the stream
	pointChildrenWait = "children-wait" // every child is named in the stream, the turn about to wait idle
)

// crashPoint lets a test stop the turn at point; nil otherwise.
func (a *Agent) crashPoint(ctx context.Context, point string) error {
	if a.stopAt == nil {
		return nil
	}
	return a.stopAt(ctx, point)
}
