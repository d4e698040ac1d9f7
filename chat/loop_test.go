package chat_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
)

// sideEffects is the tools' own record of what they did, kept outside the
// agent as a real side effect would be: runs started and completed per
// call id.
type sideEffects struct {
	mu        sync.Mutex
	started   map[string]int
	completed map[string]int
	keys      map[string]string // call id -> idempotency key seen
	// block, when set for a tool name, makes its next run signal reached
	// and wait for ctx to end (a process dying while the tool runs).
	block   map[string]bool
	reached chan struct{}
	// hold, when set for a tool name, makes its next run signal reached
	// and wait until the channel is closed, then complete.
	hold map[string]chan struct{}
}

func newSideEffects() *sideEffects {
	return &sideEffects{started: map[string]int{}, completed: map[string]int{}, keys: map[string]string{},
		block: map[string]bool{}, reached: make(chan struct{}, 1), hold: map[string]chan struct{}{}}
}

type echoIn struct {
	Text string `json:"text"`
}

type echoOut struct {
	Echo string `json:"echo"`
}

// tool returns a tool that echoes its text and records its runs.
func (s *sideEffects) tool(t *testing.T, name string, safety chat.Safety) *chat.Tool {
	t.Helper()
	tool, err := chat.NewTool(name, "echoes its text", func(ctx context.Context, in echoIn) (echoOut, error) {
		call, ok := chat.ToolCallFrom(ctx)
		if !ok {
			return echoOut{}, fmt.Errorf("no tool call in ctx")
		}
		s.mu.Lock()
		s.started[call.CallID]++
		if k, seen := s.keys[call.CallID]; seen && k != call.IdempotencyKey {
			s.mu.Unlock()
			return echoOut{}, fmt.Errorf("idempotency key changed: %s then %s", k, call.IdempotencyKey)
		}
		s.keys[call.CallID] = call.IdempotencyKey
		block, hold := s.block[name], s.hold[name]
		s.block[name] = false
		delete(s.hold, name)
		s.mu.Unlock()
		if block {
			s.reached <- struct{}{}
			<-ctx.Done()
			return echoOut{}, ctx.Err()
		}
		if hold != nil {
			s.reached <- struct{}{}
			select {
			case <-hold:
			case <-ctx.Done():
				return echoOut{}, ctx.Err()
			}
		}
		s.mu.Lock()
		s.completed[call.CallID]++
		s.mu.Unlock()
		return echoOut{Echo: name + ":" + in.Text}, nil
	}, chat.WithSafety(safety))
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func (s *sideEffects) counts() (started, completed map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return copyMap(s.started), copyMap(s.completed)
}

func copyMap(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func withTools(t *testing.T, tools ...*chat.Tool) func(*chat.Config) {
	t.Helper()
	ts, err := chat.NewTools(tools...)
	if err != nil {
		t.Fatal(err)
	}
	return func(c *chat.Config) { c.Tools = ts }
}

// twoTools is a prompt the local model answers in three steps: a call of
// safe, a call of risky, then text quoting both outputs.
const twoTools = "/tool safe {\"text\":\"one\"}\n/tool risky {\"text\":\"two\"}"

func toolParts(m chat.Message) []chat.Part {
	var out []chat.Part
	for _, p := range m.Parts {
		if p.Type == chat.PartTool {
			out = append(out, p)
		}
	}
	return out
}

// checkStream checks the chunks of a finished multi-step stream: every
// tool call has exactly one input and one output chunk, outputs follow
// their inputs in call order, steps are framed, one terminal chunk.
func checkStream(t *testing.T, cs []chunk.Chunk) {
	t.Helper()
	inputs, outputs := map[string]int{}, map[string]int{}
	var order []string
	open := false
	for i, c := range cs {
		switch c.Type {
		case chunk.StartStep:
			if open {
				t.Errorf("chunk %d: start-step inside a step", i)
			}
			open = true
		case chunk.FinishStep:
			if !open {
				t.Errorf("chunk %d: finish-step outside a step", i)
			}
			open = false
		case chunk.ToolInput, chunk.ToolInputError:
			inputs[c.ToolCallID]++
			order = append(order, c.ToolCallID)
		case chunk.ToolOutput, chunk.ToolOutputError:
			if inputs[c.ToolCallID] == 0 {
				t.Errorf("chunk %d: output of %s before its input", i, c.ToolCallID)
			}
			outputs[c.ToolCallID]++
		}
		if c.Terminal() && i != len(cs)-1 {
			t.Errorf("chunk %d (%s) is terminal but not last", i, c.Type)
		}
	}
	for id, n := range inputs {
		if n != 1 || outputs[id] > 1 {
			t.Errorf("call %s: %d inputs, %d outputs", id, n, outputs[id])
		}
	}
	if last := cs[len(cs)-1]; last.Type != chunk.Finish {
		t.Errorf("stream ends with %s, want finish", last.Type)
	}
}

func TestToolLoopRunsStepsAndTools(t *testing.T) {
	e := newEnv(t)
	fx := newSideEffects()
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}),
		withTools(t, fx.tool(t, "safe", chat.Idempotent), fx.tool(t, "risky", chat.Unsafe)))
	turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: twoTools})
	if err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	tr := lastTurn(t, e, "a1")
	if tr.Status != chat.TurnCompleted || tr.FinishReason != llm.FinishStop {
		t.Fatalf("turn = %s %q %q", tr.Status, tr.FinishReason, tr.Error)
	}
	msgs := settled(t, e, "a1")
	if len(msgs) != 2 {
		t.Fatalf("%d messages, want 2", len(msgs))
	}
	m := msgs[1]
	tools := toolParts(m)
	if len(tools) != 2 || tools[0].ToolName != "safe" || tools[1].ToolName != "risky" {
		t.Fatalf("tool parts = %+v", tools)
	}
	for _, p := range tools {
		if p.State != chat.ToolOutput {
			t.Errorf("%s: state %s, want %s", p.ToolName, p.State, chat.ToolOutput)
		}
	}
	if want := `The safe tool returned: {"echo":"safe:one"}. The risky tool returned: {"echo":"risky:two"}.`; m.Text() != want {
		t.Errorf("answer %q, want %q", m.Text(), want)
	}
	cs, _ := streamOf(t, e.lg, "a1", turn.StreamID)
	checkStream(t, cs)
	if n := count(cs, chunk.StartStep); n != 3 {
		t.Errorf("%d steps, want 3", n)
	}
	_, completed := fx.counts()
	for _, p := range tools {
		if completed[p.ToolCallID] != 1 {
			t.Errorf("%s ran %d times", p.ToolName, completed[p.ToolCallID])
		}
	}
	u, err := e.store.Usage("a1")
	if err != nil {
		t.Fatal(err)
	}
	if u.Output == 0 {
		t.Errorf("usage = %+v, want the steps' tokens", u)
	}
}

// TestToolCrashPoints kills a three-step, two-tool turn at each crash
// point of a step and recovers it in a new incarnation: the turn completes
// with one assistant message holding every step, no completed tool runs
// twice, an unsafe tool cut off is not run again and the model is told,
// and the stream holds every chunk once.
func TestToolCrashPoints(t *testing.T) {
	cases := []struct {
		name  string
		point string // a crash point of chat.StopAt; "" for a blocking tool
		block string // the tool that blocks while running
		skip  int    // crash points of that name to pass before stopping
		// wantMaybe: the risky call ends with the maybe-executed error.
		wantMaybe bool
	}{
		{name: "before the first tool runs", point: "tools-begin"},
		{name: "while the idempotent tool runs", block: "safe"},
		{name: "after the first result is recorded", point: "tool-recorded"},
		{name: "after the first step's outputs", point: "step-done"},
		{name: "before the second tool runs", point: "tools-begin", skip: 1},
		{name: "while the unsafe tool runs", block: "risky", wantMaybe: true},
		{name: "after the unsafe result is recorded", point: "tool-recorded", skip: 1},
		{name: "after the second step's outputs", point: "step-done", skip: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			fx := newSideEffects()
			tools := withTools(t, fx.tool(t, "safe", chat.Idempotent), fx.tool(t, "risky", chat.Unsafe))
			local := llm.NewLocal(llm.LocalConfig{Rate: -1})
			h := e.host(t, "a1", local, tools)
			reached := fx.reached
			if tc.block != "" {
				fx.block[tc.block] = true
			} else {
				seen := 0
				chat.StopAt(h.a, func(ctx context.Context, point string) error {
					if point != tc.point {
						return nil
					}
					if seen++; seen <= tc.skip {
						return nil
					}
					reached <- struct{}{}
					<-ctx.Done()
					return ctx.Err()
				})
			}
			turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: twoTools})
			if err != nil {
				t.Fatal(err)
			}
			wait(t, reached)
			h.r.Close()

			recoverHost(t, e, "a1", local, tools)
			tr := lastTurn(t, e, "a1")
			if tr.Status != chat.TurnCompleted {
				t.Fatalf("turn = %s %q", tr.Status, tr.Error)
			}
			msgs := settled(t, e, "a1")
			if len(msgs) != 2 {
				t.Fatalf("%d messages, want 2", len(msgs))
			}
			parts := toolParts(msgs[1])
			if len(parts) != 2 {
				t.Fatalf("tool parts = %+v", parts)
			}
			started, completed := fx.counts()
			for _, p := range parts {
				if completed[p.ToolCallID] > 1 {
					t.Errorf("%s completed %d times", p.ToolName, completed[p.ToolCallID])
				}
			}
			safe, risky := parts[0], parts[1]
			if safe.State != chat.ToolOutput || completed[safe.ToolCallID] != 1 {
				t.Errorf("safe: state %s, completed %d times", safe.State, completed[safe.ToolCallID])
			}
			if tc.wantMaybe {
				if risky.State != chat.ToolOutputError || risky.ErrorText != chat.ErrTextMaybeExecuted {
					t.Errorf("risky: %s %q, want the maybe-executed error", risky.State, risky.ErrorText)
				}
				if started[risky.ToolCallID] != 1 {
					t.Errorf("risky started %d times, want 1 (never re-run)", started[risky.ToolCallID])
				}
				if !strings.Contains(msgs[1].Text(), "The risky tool failed: "+chat.ErrTextMaybeExecuted) {
					t.Errorf("the model was not told: %q", msgs[1].Text())
				}
			} else if risky.State != chat.ToolOutput || completed[risky.ToolCallID] != 1 || started[risky.ToolCallID] != 1 {
				t.Errorf("risky: state %s, started %d, completed %d", risky.State, started[risky.ToolCallID], completed[risky.ToolCallID])
			}
			cs, _ := streamOf(t, e.lg, "a1", turn.StreamID)
			checkStream(t, cs)
		})
	}
}

// TestToolCrashWhileModelStreams: a crash while the final step streams
// continues that step's text only; the earlier steps reach the model as
// messages, and no tool runs again.
func TestToolCrashWhileModelStreams(t *testing.T) {
	e := newEnv(t)
	fx := newSideEffects()
	tools := withTools(t, fx.tool(t, "safe", chat.Idempotent), fx.tool(t, "risky", chat.Unsafe))
	reached := make(chan struct{}, 1)
	h := e.host(t, "a1", &fake{scripts: []script{passLocal(), passLocal(), cutAfter(3, reached)}}, tools)
	turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: twoTools})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, reached)
	h.r.Close()
	p := &fake{scripts: []script{passLocal()}}
	recoverHost(t, e, "a1", p, tools)
	if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnCompleted {
		t.Fatalf("turn = %s %q", tr.Status, tr.Error)
	}
	if len(p.reqs) != 1 {
		t.Fatalf("%d model calls after recovery, want 1", len(p.reqs))
	}
	req := p.reqs[0]
	if req.Continue == nil || req.Continue.PartialText == "" || strings.Contains(req.Continue.PartialText, "\n") {
		t.Errorf("continuation = %+v, want the third step's text only", req.Continue)
	}
	var results int
	for _, m := range req.Messages {
		for _, part := range m.Parts {
			if part.ToolResult != nil {
				results++
			}
		}
	}
	if results != 2 {
		t.Errorf("%d tool results sent, want 2", results)
	}
	msgs := settled(t, e, "a1")
	want := `The safe tool returned: {"echo":"safe:one"}. The risky tool returned: {"echo":"risky:two"}.`
	if got := msgs[len(msgs)-1].Text(); got != want {
		t.Errorf("answer %q, want %q", got, want)
	}
	_, completed := fx.counts()
	for id, n := range completed {
		if n != 1 {
			t.Errorf("call %s completed %d times", id, n)
		}
	}
	cs, _ := streamOf(t, e.lg, "a1", turn.StreamID)
	checkStream(t, cs)
}

func TestToolLoopStepLimit(t *testing.T) {
	e := newEnv(t)
	fx := newSideEffects()
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), func(c *chat.Config) {
		withTools(t, fx.tool(t, "safe", chat.Idempotent), fx.tool(t, "risky", chat.Unsafe))(c)
		c.MaxSteps = 2
	})
	turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: twoTools + "\n/tool safe {\"text\":\"three\"}"})
	if err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	tr := lastTurn(t, e, "a1")
	if tr.Status != chat.TurnCompleted || tr.FinishReason != chat.FinishStepLimit {
		t.Fatalf("turn = %s %q, want completed at the step limit", tr.Status, tr.FinishReason)
	}
	cs, _ := streamOf(t, e.lg, "a1", turn.StreamID)
	checkStream(t, cs)
	if last := cs[len(cs)-1]; last.FinishReason != "tool-calls" {
		t.Errorf("finish chunk says %q, want the AI SDK's tool-calls", last.FinishReason)
	}
	if n := count(cs, chunk.StartStep); n != 2 {
		t.Errorf("%d steps, want 2", n)
	}
}

// TestToolBadCalls: arguments that are not JSON, arguments the schema
// refuses and an unknown tool each reach the model as a tool error; the
// turn completes.
func TestToolBadCalls(t *testing.T) {
	e := newEnv(t)
	fx := newSideEffects()
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), withTools(t, fx.tool(t, "safe", chat.Idempotent)))
	turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: "/tool safe {not json\n/tool safe {\"text\":3}\n/tool nope {}"})
	if err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnCompleted {
		t.Fatalf("turn = %s %q", tr.Status, tr.Error)
	}
	msgs := settled(t, e, "a1")
	parts := toolParts(msgs[1])
	if len(parts) != 3 {
		t.Fatalf("tool parts = %+v", parts)
	}
	for _, p := range parts {
		if p.State != chat.ToolOutputError || p.ErrorText == "" {
			t.Errorf("%s: %s %q, want an error output", p.ToolName, p.State, p.ErrorText)
		}
	}
	if _, completed := fx.counts(); len(completed) != 0 {
		t.Errorf("the tool ran on bad input: %v", completed)
	}
	if got := strings.Count(msgs[1].Text(), "tool failed"); got != 3 {
		t.Errorf("the model was told of %d failures, want 3: %q", got, msgs[1].Text())
	}
	cs, _ := streamOf(t, e.lg, "a1", turn.StreamID)
	checkStream(t, cs)
	if count(cs, chunk.ToolInputError) != 1 {
		t.Errorf("want one tool-input-error for the arguments that are not JSON")
	}
}

// TestClientToolEndsTheTurn: a call of a tool the client offered (not a
// server tool) ends the turn with finish "tool-calls", the call waiting
// for the client.
func TestClientToolEndsTheTurn(t *testing.T) {
	e := newEnv(t)
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), nil)
	_, err := h.a.Send(t.Context(), chat.SendRequest{Text: "/tool pick {\"n\":1}",
		Tools: []llm.Tool{{Name: "pick", Schema: json.RawMessage(`{"type":"object"}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	tr := lastTurn(t, e, "a1")
	if tr.Status != chat.TurnCompleted || tr.FinishReason != llm.FinishToolCalls {
		t.Fatalf("turn = %s %q", tr.Status, tr.FinishReason)
	}
	msgs := settled(t, e, "a1")
	parts := toolParts(msgs[1])
	if len(parts) != 1 || parts[0].State != chat.ToolInputAvailable {
		t.Fatalf("parts = %+v, want one call waiting for the client", parts)
	}
}

func approved(v bool) *bool { return &v }

// waitingCall returns the one tool part of the last assistant message.
func waitingCall(t *testing.T, e *env) chat.Part {
	t.Helper()
	msgs := settled(t, e, "a1")
	parts := toolParts(msgs[len(msgs)-1])
	if len(parts) != 1 {
		t.Fatalf("tool parts = %+v, want one", parts)
	}
	return parts[0]
}

// TestApprovalAcrossRestart: a call of a tool that needs approval ends the
// turn waiting (tool-approval-request, finish tool-calls) without running;
// the answer, given to a new incarnation, runs it once and the model goes
// on; a second answer is refused.
func TestApprovalAcrossRestart(t *testing.T) {
	for _, ok := range []bool{true, false} {
		t.Run(fmt.Sprintf("approved=%v", ok), func(t *testing.T) {
			e := newEnv(t)
			fx := newSideEffects()
			risky := func() *chat.Tool {
				tool, err := chat.NewTool("risky", "needs approval", func(ctx context.Context, in echoIn) (echoOut, error) {
					call, _ := chat.ToolCallFrom(ctx)
					fx.mu.Lock()
					fx.completed[call.CallID]++
					fx.mu.Unlock()
					return echoOut{Echo: in.Text}, nil
				}, chat.AlwaysNeedsApproval())
				if err != nil {
					t.Fatal(err)
				}
				return tool
			}
			local := llm.NewLocal(llm.LocalConfig{Rate: -1})
			h := e.host(t, "a1", local, withTools(t, risky()))
			first, err := h.a.Send(t.Context(), chat.SendRequest{Text: "/tool risky {\"text\":\"x\"}"})
			if err != nil {
				t.Fatal(err)
			}
			h.r.Wait()
			if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnCompleted || tr.FinishReason != llm.FinishToolCalls {
				t.Fatalf("turn = %s %q", tr.Status, tr.FinishReason)
			}
			call := waitingCall(t, e)
			if call.State != chat.ToolApprovalRequested || call.Approval == nil || call.Approval.ID == "" {
				t.Fatalf("call = %+v, want approval-requested", call)
			}
			cs, _ := streamOf(t, e.lg, "a1", first.StreamID)
			if count(cs, chunk.ToolApprovalRequest) != 1 || cs[len(cs)-1].FinishReason != "tool-calls" {
				t.Fatalf("stream = %+v", cs)
			}
			if _, done := fx.counts(); len(done) != 0 {
				t.Fatal("the tool ran before its approval")
			}
			h.r.Close()

			h = e.host(t, "a1", local, withTools(t, risky()))
			if _, err := h.a.Answer(t.Context(), []chat.ToolAnswer{{CallID: "nope", Approved: approved(true)}}, nil); !errors.Is(err, chat.ErrUnknownToolCall) {
				t.Fatalf("answer to an unknown call = %v", err)
			}
			next, err := h.a.Answer(t.Context(), []chat.ToolAnswer{{ApprovalID: call.Approval.ID, Approved: approved(ok), Reason: "not today"}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			h.r.Wait()
			if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnCompleted || tr.FinishReason != llm.FinishStop {
				t.Fatalf("resumed turn = %s %q %q", tr.Status, tr.FinishReason, tr.Error)
			}
			msgs := settled(t, e, "a1")
			if len(msgs) != 2 {
				t.Fatalf("%d messages, want the user's and one assistant message", len(msgs))
			}
			got := waitingCall(t, e)
			_, done := fx.counts()
			if ok {
				if got.State != chat.ToolOutput || done[got.ToolCallID] != 1 {
					t.Errorf("approved call: %s, ran %d times", got.State, done[got.ToolCallID])
				}
			} else {
				if got.State != chat.ToolOutputDenied || len(done) != 0 {
					t.Errorf("denied call: %s, ran %v", got.State, done)
				}
				if want := "The risky tool failed: " + chat.ErrTextDenied + ": not today."; msgs[1].Text() != want {
					t.Errorf("answer %q, want %q", msgs[1].Text(), want)
				}
			}
			cs, _ = streamOf(t, e.lg, "a1", next.StreamID)
			if cs[0].Type != chunk.Start || cs[0].MessageID != msgs[1].ID {
				t.Errorf("the resumed stream starts with %+v, want the waiting message's id", cs[0])
			}
			if _, err := h.a.Answer(t.Context(), []chat.ToolAnswer{{CallID: got.ToolCallID, Approved: approved(true)}}, nil); !errors.Is(err, chat.ErrAlreadyAnswered) {
				t.Fatalf("second answer = %v, want ErrAlreadyAnswered", err)
			}
		})
	}
}

// TestAnswerRightAfterFinish: a client answers an approval as soon as the
// stream's finish chunk is stored, before the turn has recorded the
// message it answers (the AI SDK does). The answer waits for the turn to
// record its end instead of failing with ErrUnknownToolCall.
func TestAnswerRightAfterFinish(t *testing.T) {
	e := newEnv(t)
	tool, err := chat.NewTool("risky", "needs approval", func(ctx context.Context, in echoIn) (echoOut, error) {
		return echoOut{Echo: in.Text}, nil
	}, chat.AlwaysNeedsApproval())
	if err != nil {
		t.Fatal(err)
	}
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), withTools(t, tool))
	reached, release := holdAtEnded(h)
	first, err := h.a.Send(t.Context(), chat.SendRequest{Text: "/tool risky {\"text\":\"x\"}"})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, reached)
	cs, _ := streamOf(t, e.lg, "a1", first.StreamID)
	var req chunk.Chunk
	for _, c := range cs {
		if c.Type == chunk.ToolApprovalRequest {
			req = c
		}
	}
	if req.ApprovalID == "" {
		close(release)
		t.Fatalf("stream %+v has no approval request", cs)
	}
	answered := make(chan error, 1)
	go func() {
		_, err := h.a.Answer(t.Context(), []chat.ToolAnswer{{ApprovalID: req.ApprovalID, Approved: approved(true)}}, nil)
		answered <- err
	}()
	select {
	case err := <-answered:
		close(release)
		t.Fatalf("the answer returned (%v) before the turn recorded its end", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-answered; err != nil {
		t.Fatalf("answer right after finish: %v", err)
	}
	h.r.Wait()
	if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnCompleted || tr.FinishReason != llm.FinishStop {
		t.Fatalf("resumed turn = %s %q %q", tr.Status, tr.FinishReason, tr.Error)
	}
}

// TestApprovedUnsafeToolCutOff: an approved unsafe call cut off by a crash
// is not run again after recovery; the model is told.
func TestApprovedUnsafeToolCutOff(t *testing.T) {
	e := newEnv(t)
	fx := newSideEffects()
	mk := func() func(*chat.Config) {
		tool, err := chat.NewTool("risky", "needs approval", func(ctx context.Context, in echoIn) (echoOut, error) {
			fx.mu.Lock()
			fx.started["risky"]++
			fx.mu.Unlock()
			fx.reached <- struct{}{}
			<-ctx.Done()
			return echoOut{}, ctx.Err()
		}, chat.AlwaysNeedsApproval())
		if err != nil {
			t.Fatal(err)
		}
		return withTools(t, tool)
	}
	local := llm.NewLocal(llm.LocalConfig{Rate: -1})
	h := e.host(t, "a1", local, mk())
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "/tool risky {\"text\":\"x\"}"}); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	call := waitingCall(t, e)
	if _, err := h.a.Answer(t.Context(), []chat.ToolAnswer{{CallID: call.ToolCallID, Approved: approved(true)}}, nil); err != nil {
		t.Fatal(err)
	}
	wait(t, fx.reached)
	h.r.Close()
	recoverHost(t, e, "a1", local, mk())
	if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnCompleted {
		t.Fatalf("turn = %s %q", tr.Status, tr.Error)
	}
	got := waitingCall(t, e)
	if got.State != chat.ToolOutputError || got.ErrorText != chat.ErrTextMaybeExecuted {
		t.Errorf("call = %s %q, want the maybe-executed error", got.State, got.ErrorText)
	}
	if started, _ := fx.counts(); started["risky"] != 1 {
		t.Errorf("the approved unsafe tool started %d times, want 1", started["risky"])
	}
}

// TestClientToolResult: a client's result for a waiting client tool call
// resumes the turn; the model answers with it.
func TestClientToolResult(t *testing.T) {
	e := newEnv(t)
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), nil)
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "/tool pick {\"n\":1}",
		Tools: []llm.Tool{{Name: "pick", Schema: json.RawMessage(`{"type":"object"}`)}}}); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	call := waitingCall(t, e)
	if _, err := h.a.Answer(t.Context(), []chat.ToolAnswer{{CallID: call.ToolCallID, Approved: approved(true)}}, nil); !errors.Is(err, chat.ErrAlreadyAnswered) {
		t.Fatalf("approving a call that waits for a result = %v", err)
	}
	if _, err := h.a.Answer(t.Context(), []chat.ToolAnswer{{CallID: call.ToolCallID, Output: json.RawMessage(`{"picked":7}`)}}, nil); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	msgs := settled(t, e, "a1")
	if want := `The pick tool returned: {"picked":7}.`; msgs[len(msgs)-1].Text() != want {
		t.Errorf("answer %q, want %q", msgs[len(msgs)-1].Text(), want)
	}
	if _, err := h.a.Answer(t.Context(), []chat.ToolAnswer{{CallID: call.ToolCallID, Output: json.RawMessage(`1`)}}, nil); !errors.Is(err, chat.ErrAlreadyAnswered) {
		t.Fatalf("second result = %v, want ErrAlreadyAnswered", err)
	}
}

// laterClock is the system clock moved ahead by d.
type laterClock struct{ d time.Duration }

func (c laterClock) Now() time.Time                         { return time.Now().Add(c.d) }
func (c laterClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// TestToolWaitExpires: an answer after Config.ToolWaitTimeout is refused
// with ErrWaitExpired; the next message tells the model the call was not
// answered.
func TestToolWaitExpires(t *testing.T) {
	e := newEnv(t)
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), nil)
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "/tool pick {}",
		Tools: []llm.Tool{{Name: "pick", Schema: json.RawMessage(`{"type":"object"}`)}}}); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	call := waitingCall(t, e)
	h.r.Close()
	p := &fake{scripts: []script{passLocal()}}
	h = e.host(t, "a1", p, func(c *chat.Config) { c.Clock, c.ToolWaitTimeout = laterClock{2 * time.Hour}, time.Hour })
	if _, err := h.a.Answer(t.Context(), []chat.ToolAnswer{{CallID: call.ToolCallID, Output: json.RawMessage(`1`)}}, nil); !errors.Is(err, chat.ErrWaitExpired) {
		t.Fatalf("late answer = %v, want ErrWaitExpired", err)
	}
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "never mind"}); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	var told bool
	for _, m := range p.reqs[0].Messages {
		for _, part := range m.Parts {
			if r := part.ToolResult; r != nil && r.CallID == call.ToolCallID && r.IsError && r.Output == chat.ErrTextUnanswered {
				told = true
			}
		}
	}
	if !told {
		t.Errorf("the model was not told the call went unanswered: %+v", p.reqs[0].Messages)
	}
}

// TestToolOutputTooLarge: a 2 MB tool output reaches the model as a clear
// tool error, and the turn completes.
func TestToolOutputTooLarge(t *testing.T) {
	e := newEnv(t)
	big, err := chat.NewTool("big", "returns 2 MB", func(ctx context.Context, in struct{}) (string, error) {
		return strings.Repeat("x", 2<<20), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), withTools(t, big))
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "/tool big {}"}); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnCompleted {
		t.Fatalf("turn = %s %q", tr.Status, tr.Error)
	}
	call := toolParts(settled(t, e, "a1")[1])[0]
	if call.State != chat.ToolOutputError || !strings.Contains(call.ErrorText, "bytes") {
		t.Errorf("call = %s %q, want an error naming the size", call.State, call.ErrorText)
	}
}

// TestSettleRightAfterFinish: a read of the conversation right after the
// stream's finish chunk (the AI SDK makes one) waits, through Settle, for
// the turn to record its end, and then sees the final assistant message.
func TestSettleRightAfterFinish(t *testing.T) {
	e := newEnv(t)
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), nil)
	reached, release := holdAtEnded(h)
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	wait(t, reached)
	settled := make(chan error, 1)
	go func() { settled <- h.a.Settle(t.Context()) }()
	select {
	case err := <-settled:
		close(release)
		t.Fatalf("Settle returned (%v) before the turn recorded its end", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-settled; err != nil {
		t.Fatalf("settle: %v", err)
	}
	msgs, _, err := h.a.Messages(chat.Page{})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || msgs[1].Role != "assistant" || len(msgs[1].Parts) == 0 {
		t.Fatalf("after Settle: %+v, want the user message and the final assistant message", msgs)
	}
}

// TestSendAsTheFinishIsWritten: a turn marks its stream ending before it
// writes its finish chunk, so a client that reads the chunk the moment it
// is durable (before the write returns to the turn) and sends its next
// message at once waits for the turn's end instead of being refused. The
// turn is held where it is about to write the chunk: a Send then waits,
// and once the turn goes on it starts the next turn. Marked after the
// write, the AI SDK's second message was refused (409, a turn is already
// active) in CI.
func TestSendAsTheFinishIsWritten(t *testing.T) {
	e := newEnv(t)
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), nil)
	reached, release := holdAt(h, "ending")
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "one"}); err != nil {
		t.Fatal(err)
	}
	wait(t, reached)
	sent := make(chan error, 1)
	go func() {
		_, err := h.a.Send(t.Context(), chat.SendRequest{Text: "two"})
		sent <- err
	}()
	select {
	case err := <-sent:
		close(release)
		t.Fatalf("Send returned (%v) while the previous turn wrote its finish, want it to wait for that turn's end", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-sent; err != nil {
		t.Fatalf("Send once the previous turn ended: %v", err)
	}
	h.r.Wait()
	msgs := settled(t, e, "a1")
	if len(msgs) != 4 || msgs[1].Role != "assistant" || msgs[3].Role != "assistant" {
		t.Fatalf("after both turns: %+v, want two questions, each answered", msgs)
	}
}

// holdAtEnded holds h's next turn between its finish chunk and its end
// records: reached gets a value when it gets there, and closing release
// lets it go on.
func holdAtEnded(h *host) (reached chan struct{}, release chan struct{}) {
	return holdAt(h, "ended")
}

// holdAt holds h's next turn at its crash point named at, as holdAtEnded.
func holdAt(h *host, at string) (reached chan struct{}, release chan struct{}) {
	reached, release = make(chan struct{}, 1), make(chan struct{})
	chat.StopAt(h.a, func(ctx context.Context, point string) error {
		if point == at {
			select {
			case reached <- struct{}{}:
				<-release
			default:
			}
		}
		return nil
	})
	return reached, release
}
