package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/forever-agents/forever/blob"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/fiber"
)

// DefaultMaxParallelTools bounds the server tool calls of one step that run
// at once.
const DefaultMaxParallelTools = 4

// Tool errors the model is shown for calls the server could not run.
const (
	// ErrTextMaybeExecuted is the output-error of an unsafe tool whose run
	// was cut off by a crash: it is not run again.
	ErrTextMaybeExecuted = "the tool may have executed before the agent restarted; its outcome is unknown, and it was not run again"
	// ErrTextInputCut is the output-error of a call whose input the model
	// had not finished when the turn was interrupted.
	ErrTextInputCut = "the tool call was interrupted before its input was complete; it was not run"
)

// toolResult is a tool call's outcome as its step records it (the op's
// result): the output, or the error text the model is shown. A recorded
// result is never computed again.
type toolResult struct {
	Output json.RawMessage `json:"output,omitempty"`
	// OutputRef holds an output over Config.BlobThreshold, stored by
	// reference (Config.Blobs) before the step records it.
	OutputRef *blob.Ref `json:"outputRef,omitempty"`
	Error     string    `json:"error,omitempty"`
	ErrorType string    `json:"errorType,omitempty"`
}

// toolStepKey is the fiber.Step key of a tool call: the call id names the
// work, so a resumed turn finds the op its earlier run recorded.
func toolStepKey(callID string) string { return "tool:" + callID }

// toolsPhase runs the server tool calls of the current step that have no
// output yet, at most Config.MaxParallelTools at once, and writes their
// outputs in call order. A call of a tool the server does not have and the
// turn did not offer as a client tool gets an error output; client tool
// calls are left for the client.
func (st *turnRun) toolsPhase(ctx, fctx context.Context, lp *loop) (phase, error) {
	a, em := st.a, st.emitter()
	// What the model streamed is durable before any tool runs.
	if _, err := em.w.Flush(fctx); err != nil {
		return 0, fmt.Errorf("%w: %w", errWrite, err)
	}
	if err := a.crashPoint(fctx, pointToolsBegin); err != nil {
		return 0, err
	}
	jobs, clientLeft := st.toolJobs(lp, pendingCalls(em.b.stepCalls()))
	step := em.b.steps // read here: the calls run beside the writes to em.b
	if len(jobs) == 1 && jobs[0].tool != nil && !clientLeft {
		// The step's only call: its completion also records the snapshot
		// stepDone would stash, one synced write for both.
		jobs[0].then = st.afterStep(lp, em.b.steps, em.b.chunks)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	// Returning early (the log failed) stops the calls still running.
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(errWrite)
	st.runToolJobs(ctx, step, jobs, &wg)
	var children []*childJob
	for _, j := range jobs {
		if j.child != nil {
			children = append(children, j.child)
		}
	}
	if len(children) > 0 {
		// Sub-agent calls: the step waits for them after its other tools.
		if err := st.awaitChildren(ctx, fctx, children, wg.Wait); err != nil {
			return 0, err
		}
	}
	if err := st.endToolJobs(fctx, lp, step, jobs); err != nil {
		return 0, err
	}
	if clientLeft {
		return phaseClient, nil
	}
	return phaseStepDone, nil
}

// announcedCall returns the step key of the call whose op.started the
// usage stash before the step's tools carries (fiber.AnnounceStep), or ""
// for none: only at record format 9 (Config.AnnouncedStepsWritable), and
// only for the step's one pending call when it is of an Idempotent server
// tool that runs at once (no approval, not a sub-agent), the call
// toolJobs then gives to runTool. An Unsafe tool's op.started stays a
// write of its own after the stash: a crash between the two leaves the
// tool not started, so it runs once after a recovery instead of being
// reported as maybe executed (TestToolCrashPoints, "before the second tool
// runs"). An Idempotent call announced and cut off by a crash runs again
// with the same idempotency key, as after a crash while it ran.
func (st *turnRun) announcedCall() string {
	a := st.a
	if a.cfg.AnnouncedStepsWritable == nil || !a.cfg.AnnouncedStepsWritable() {
		return ""
	}
	pending := pendingCalls(st.emitter().b.stepCalls())
	if len(pending) != 1 || pending[0].State != ToolInputAvailable {
		return ""
	}
	c := pending[0]
	t, server := a.cfg.Tools.Lookup(c.ToolName)
	if !server || t.sub != nil || t.Safety() != Idempotent || t.needsApproval(c.Input) {
		return ""
	}
	return toolStepKey(c.ToolCallID)
}

// toolJob is one pending call of a step in toolsPhase.
type toolJob struct {
	call Part
	tool *Tool
	done chan toolResult
	err  error
	// chunk, when set, is what ends the call instead of a result:
	// an approval request, a denial.
	chunk *chunk.Chunk
	// child is set for a call of an agent tool (awaitChildren).
	child *childJob
	// then, when set, is the snapshot of the step after it, which the
	// call's op.completed carries (fiber.ThenStash); stashed reports
	// that it did. Read once done delivered a result.
	then    *snapshot
	stashed bool
}

// toolJobs says what becomes of each pending call of the step: a server
// tool runs (tool) or a sub-agent is called (child), an approval is asked
// or a denial shown (chunk), or its result is known already (done);
// clientLeft reports calls left to the client (its tools, approvals).
func (st *turnRun) toolJobs(lp *loop, pending []Part) (jobs []*toolJob, clientLeft bool) {
	a := st.a
	for _, c := range pending {
		j := &toolJob{call: c}
		t, server := a.cfg.Tools.Lookup(c.ToolName)
		ans, answered := answerFor(st.info.Answers, c.ToolCallID)
		switch {
		case c.State == ToolApprovalRequested:
			clientLeft = true // still waiting for its approval
			continue
		case c.State == ToolApprovalResponded && (c.Approval == nil || c.Approval.Approved == nil || !*c.Approval.Approved):
			j.chunk = &chunk.Chunk{Type: chunk.ToolOutputDenied, ToolCallID: c.ToolCallID}
		case c.State == ToolApprovalResponded && server:
			j.tool = t // approved: it runs, once
		case c.State != ToolInputAvailable && c.State != ToolApprovalResponded:
			j.done = resolved(toolResult{Error: ErrTextInputCut, ErrorType: "input_cut"})
		case server && t.sub != nil:
			j.child = newChildJob(c, t)
		case server && t.needsApproval(c.Input):
			j.chunk = &chunk.Chunk{Type: chunk.ToolApprovalRequest, ToolCallID: c.ToolCallID, ApprovalID: approvalID(c.ToolCallID)}
			clientLeft = true
		case server:
			j.tool = t
		case answered && !ans.approval():
			j.done = resolved(toolResult{Output: ans.Output, Error: ans.ErrorText, ErrorType: "client"})
		case lp.client[c.ToolName]:
			clientLeft = true
			continue
		default:
			j.done = resolved(toolResult{Error: fmt.Sprintf("unknown tool %q", c.ToolName), ErrorType: "unknown_tool"})
		}
		jobs = append(jobs, j)
	}
	return jobs, clientLeft
}

// runToolJobs runs the jobs' server tools of step, at most
// MaxParallelTools at once, each in a goroutine that wg counts and that
// delivers on its job's done (closed, with err set, when it failed).
func (st *turnRun) runToolJobs(ctx context.Context, step int, jobs []*toolJob, wg *sync.WaitGroup) {
	sem := make(chan struct{}, st.a.cfg.MaxParallelTools)
	for _, j := range jobs {
		if j.done != nil || j.chunk != nil || j.child != nil {
			continue
		}
		j.done = make(chan toolResult, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				j.err = context.Cause(ctx)
				close(j.done)
				return
			}
			defer func() { <-sem }()
			res, stashed, err := st.runTool(ctx, step, j.tool, j.call, j.then)
			j.stashed = stashed
			if err != nil {
				j.err = err
				close(j.done)
				return
			}
			j.done <- res
		}()
	}
}

// endToolJobs writes what ends each job's call into the stream, in the
// calls' order: its chunk, its child's end, or its result once done.
func (st *turnRun) endToolJobs(fctx context.Context, lp *loop, step int, jobs []*toolJob) error {
	a, em := st.a, st.emitter()
	for _, j := range jobs {
		if j.chunk != nil {
			if err := em.emit(fctx, *j.chunk); err != nil {
				return fmt.Errorf("%w: %w", errWrite, err)
			}
			continue
		}
		if j.child != nil {
			if err := st.endChildCall(fctx, j.child); err != nil {
				return err
			}
			continue
		}
		res, ok := <-j.done
		if !ok {
			return j.err
		}
		if j.stashed {
			st.snap, lp.usage = *j.then, llm.Usage{}
			st.stashedStep = step
		}
		if err := a.crashPoint(fctx, pointToolRecorded); err != nil {
			return err
		}
		if err := em.emit(fctx, outputChunk(j.call.ToolCallID, res)); err != nil {
			return fmt.Errorf("%w: %w", errWrite, err)
		}
	}
	return nil
}

// outputChunk is the chunk that ends call callID with res. An output its
// step recorded by reference keeps that reference in the chunk's Blobs
// (the emitter stores the chunk with the reference alone when chunks may
// hold references).
func outputChunk(callID string, res toolResult) chunk.Chunk {
	if res.Error != "" || len(res.Output) == 0 {
		return chunk.Chunk{Type: chunk.ToolOutputError, ToolCallID: callID, ErrorText: res.Error}
	}
	c := chunk.Chunk{Type: chunk.ToolOutput, ToolCallID: callID, Output: res.Output}
	if res.OutputRef != nil {
		c.Blobs = &chunk.Blobs{Output: res.OutputRef}
	}
	return c
}

func resolved(r toolResult) chan toolResult {
	ch := make(chan toolResult, 1)
	ch <- r
	return ch
}

// runTool runs one server tool call as a fiber step keyed by its call id:
// a completed call returns its recorded result; a call an earlier run
// started and did not finish runs again with the same idempotency key when
// the tool is Idempotent, and otherwise is not run again: its result is the
// ErrTextMaybeExecuted error. A tool's own failure is a recorded result
// (the model is told); an error is returned only when the turn cannot go
// on (ctx ended, the log failed).
//
// The call is an execute_tool span, the child of the turn's; the tool's
// ctx carries it (trace.SpanFromContext), so what the tool starts (a
// sub-agent's turn, an instrumented HTTP call) is its child.
//
// With then set, the call's completion records then as the turn fiber's
// snapshot (fiber.ThenStash) and stashed reports that it did; a result
// recorded by an earlier run is answered with then stashed on its own.
func (st *turnRun) runTool(ctx context.Context, step int, t *Tool, c Part, then *snapshot) (res toolResult, stashed bool, err error) {
	a := st.a
	ctx, span := st.startToolSpan(ctx, step, t, c)
	ran := false
	defer func() {
		outcome := toolOutcome(res, err)
		switch {
		case res.ErrorType == "maybe_executed":
			outcome = "maybe_executed"
		case err == nil && !ran:
			outcome = "replayed" // its recorded result: it did not run
		}
		a.endToolSpan(span, res, outcome, err)
	}()
	var opts []fiber.StepOpt
	if t.Safety() != Idempotent {
		opts = append(opts, fiber.Unsafe())
	}
	if then != nil {
		opts = append(opts, fiber.ThenStash(*then, fiber.WithAttempts(then.Attempts)))
	}
	res, err = fiber.StepJSON(ctx, toolStepKey(c.ToolCallID), func(ctx context.Context, _ string) (toolResult, error) {
		ran = true
		call := ToolCall{Agent: a.agent, RequestID: st.info.RequestID, CallID: c.ToolCallID, ToolName: c.ToolName,
			IdempotencyKey: ToolIdempotencyKey(a.agent, st.info.RequestID, c.ToolCallID)}
		out, err := t.call(withToolCall(ctx, call), c.Input)
		if err != nil {
			if ctx.Err() != nil {
				// Cut off, not failed: the op stays started, as its effect
				// is unknown.
				return toolResult{}, context.Cause(ctx)
			}
			var te *ToolError
			if errors.As(err, &te) {
				return toolResult{Error: te.Error(), ErrorType: te.Type}, nil
			}
			return toolResult{Error: err.Error(), ErrorType: "error"}, nil
		}
		return a.offloadResult(ctx, toolResult{Output: out})
	}, opts...)
	if err == nil {
		stashed = then != nil
		res, err = a.resolveResult(ctx, res)
	}
	a.metrics.toolCalls.WithLabelValues(toolOutcome(res, err)).Inc()
	if errors.Is(err, fiber.ErrMaybeExecuted) {
		a.logger.Warn("unsafe tool call cut off by a crash, not run again", "request", st.info.RequestID, "tool", c.ToolName, "call", c.ToolCallID)
		return toolResult{Error: ErrTextMaybeExecuted, ErrorType: "maybe_executed"}, false, nil
	}
	return res, stashed, err
}

func toolOutcome(r toolResult, err error) string {
	switch {
	case errors.Is(err, fiber.ErrMaybeExecuted):
		return "maybe_executed"
	case err != nil:
		return "interrupted"
	case r.Error != "":
		return "error"
	}
	return "ok"
}
