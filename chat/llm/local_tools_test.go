package llm_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/chat/llm/llmtest"
)

// toolStep checks that r is one tool call step (ResponseMeta, two or more
// ToolInputDelta pieces, ToolCallDone, Finish with FinishToolCalls, and no
// text) and returns the call.
func toolStep(t *testing.T, r llmtest.Result) llm.ToolCall {
	t.Helper()
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if r.Text != "" {
		t.Errorf("text %q before a tool call, want none", r.Text)
	}
	if got := r.Deltas[0].Kind; got != llm.ResponseMeta {
		t.Errorf("first delta %v, want ResponseMeta", got)
	}
	calls := r.Kinds(llm.ToolCallDone)
	if len(calls) != 1 {
		t.Fatalf("%d ToolCallDone deltas, want 1: %+v", len(calls), r.Deltas)
	}
	done := calls[0]
	pieces := r.Kinds(llm.ToolInputDelta)
	if len(pieces) < 2 {
		t.Errorf("%d ToolInputDelta pieces, want 2 or more", len(pieces))
	}
	var in string
	for _, d := range pieces {
		if d.ToolCallID != done.ToolCallID || d.ToolName != done.ToolName {
			t.Errorf("piece %+v, want id %q name %q", d, done.ToolCallID, done.ToolName)
		}
		in += d.Text
	}
	if in != string(done.Input) {
		t.Errorf("pieces give %q, ToolCallDone.Input %q", in, done.Input)
	}
	n := len(r.Deltas)
	if r.Deltas[n-2].Kind != llm.ToolCallDone || r.Deltas[n-1].Kind != llm.Finish {
		t.Errorf("stream does not end with ToolCallDone, Finish: %+v", r.Deltas[n-2:])
	}
	if r.Finish.FinishReason != llm.FinishToolCalls || r.Finish.Usage == nil ||
		r.Finish.Usage.OutputTokens != int64(len(pieces)) {
		t.Errorf("finish = %+v usage %+v, want tool_calls with %d output tokens", r.Finish, r.Finish.Usage, len(pieces))
	}
	return llm.ToolCall{ID: done.ToolCallID, Name: done.ToolName, Input: done.Input}
}

// withResults appends what the chat layer sends after a tool step: the
// assistant message with the call, and a tool message with its result.
func withResults(req llm.Request, call llm.ToolCall, output string, isError bool) llm.Request {
	req.Messages = append(append([]llm.Message(nil), req.Messages...),
		llm.Message{Role: llm.RoleAssistant, Parts: []llm.Part{{ToolCall: &call}}},
		llm.Message{Role: llm.RoleTool, Parts: []llm.Part{{ToolResult: &llm.ToolResult{CallID: call.ID, Output: output, IsError: isError}}}},
	)
	return req
}

func TestLocalToolThenAnswer(t *testing.T) {
	p := fastLocal()
	req := llmtest.UserRequest("What is the weather?\n/tool get_weather {\"city\": \"Paris\"}")
	req.System = "be brief"
	want, ok := p.NextToolCall(req)
	if !ok {
		t.Fatal("NextToolCall: no call")
	}
	if got := p.Answer(req); got != "" {
		t.Errorf("Answer of a tool step = %q, want empty", got)
	}
	r := llmtest.Collect(t, t.Context(), p, req)
	call := toolStep(t, r)
	if call.ID != want.ID || call.Name != "get_weather" || string(call.Input) != `{"city": "Paris"}` || string(want.Input) != string(call.Input) {
		t.Errorf("call = %+v (%s), NextToolCall = %+v", call, call.Input, want)
	}
	if !strings.HasPrefix(call.ID, "call_") || len(call.ID) != len("call_")+16 {
		t.Errorf("call id %q, want call_ and 16 hex digits", call.ID)
	}
	// "What is the weather? /tool get_weather {"city": "Paris"}" + "be brief"
	if got, want := r.Finish.Usage.InputTokens, int64(10); got != want {
		t.Errorf("InputTokens = %d, want %d", got, want)
	}

	req = withResults(req, call, "sunny, 21 °C", false)
	if _, ok := p.NextToolCall(req); ok {
		t.Error("NextToolCall after the llmtest.Result: a call, want none")
	}
	r = llmtest.Collect(t, t.Context(), p, req)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if got, want := r.Text, "The get_weather tool returned: sunny, 21 °C."; got != want {
		t.Errorf("answer %q, want %q", got, want)
	}
	if got := p.Answer(req); got != r.Text {
		t.Errorf("Answer = %q, streamed %q", got, r.Text)
	}
	if n := len(r.Kinds(llm.TextDelta)); n < 2 || r.Finish.FinishReason != llm.FinishStop || r.Finish.Usage.OutputTokens != int64(n) {
		t.Errorf("%d text deltas, finish %+v usage %+v", n, r.Finish, r.Finish.Usage)
	}
	if got, want := r.Finish.Usage.InputTokens, int64(10+3); got != want { // + the output's words
		t.Errorf("InputTokens = %d, want %d", got, want)
	}
	if len(r.Kinds(llm.ToolInputDelta)) != 0 || len(r.Kinds(llm.ToolCallDone)) != 0 {
		t.Error("tool deltas in the answer step")
	}
}

// Two /tool lines take three steps; the results come back the way the chat
// layer sends them, text and both calls in one assistant message and both
// results in one tool message.
func TestLocalTwoTools(t *testing.T) {
	p := fastLocal()
	prompt := "Plan my trip.\n/tool get_weather {\"city\":\"Oslo\"}\n  /tool get_time   {\"tz\": \"Europe/Oslo\"}  \nThanks."
	req := llmtest.UserRequest(prompt)

	first := toolStep(t, llmtest.Collect(t, t.Context(), p, req))
	if first.Name != "get_weather" || string(first.Input) != `{"city":"Oslo"}` {
		t.Fatalf("first call %+v (%s)", first, first.Input)
	}
	req2 := withResults(req, first, "snow", false)
	r2 := llmtest.Collect(t, t.Context(), p, req2)
	second := toolStep(t, r2)
	if second.Name != "get_time" || string(second.Input) != `{"tz": "Europe/Oslo"}` {
		t.Fatalf("second call %+v (%s)", second, second.Input)
	}
	if first.ID == second.ID {
		t.Errorf("both calls have id %q", first.ID)
	}
	if r2.Deltas[0].ResponseID == llmtest.Collect(t, t.Context(), p, req).Deltas[0].ResponseID {
		t.Error("both steps report the same response id")
	}

	req3 := llmtest.UserRequest(prompt)
	req3.Messages = append(req3.Messages,
		llm.Message{Role: llm.RoleAssistant, Parts: []llm.Part{{Text: "Let me check."}, {ToolCall: &first}, {ToolCall: &second}}},
		llm.Message{Role: llm.RoleTool, Parts: []llm.Part{
			{ToolResult: &llm.ToolResult{CallID: first.ID, Output: "snow"}},
			{ToolResult: &llm.ToolResult{CallID: second.ID, Output: "clock unavailable", IsError: true}},
		}},
	)
	if _, ok := p.NextToolCall(req3); ok {
		t.Error("a third call")
	}
	r3 := llmtest.Collect(t, t.Context(), p, req3)
	if r3.Err != nil {
		t.Fatal(r3.Err)
	}
	if got, want := r3.Text, "The get_weather tool returned: snow. The get_time tool failed: clock unavailable."; got != want {
		t.Errorf("answer %q, want %q", got, want)
	}
	if r3.Finish.FinishReason != llm.FinishStop {
		t.Errorf("finish %+v", r3.Finish)
	}
}

func TestLocalToolInput(t *testing.T) {
	tests := []struct {
		name, prompt, name2, input string
	}{
		{"invalid json passes raw", `/tool search {"q": "go",,`, "search", `{"q": "go",,`},
		{"not json at all", "/tool echo hello world", "echo", "hello world"},
		{"missing arguments", "/tool now", "now", "{}"},
		{"missing arguments, trailing space", "call it\n/tool now   \r\n", "now", "{}"},
		{"tab separated", "/tool\tnow\t{\"a\":1}", "now", `{"a":1}`},
		{"unicode", `/tool say {"w":"héllo wörld ✓"}`, "say", `{"w":"héllo wörld ✓"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fastLocal()
			call := toolStep(t, llmtest.Collect(t, t.Context(), p, llmtest.UserRequest(tt.prompt)))
			if call.Name != tt.name2 || string(call.Input) != tt.input {
				t.Errorf("call %s(%s), want %s(%s)", call.Name, call.Input, tt.name2, tt.input)
			}
		})
	}
	// Lines that only look like /tool lines are not calls.
	for _, prompt := range []string{"/toolbox {}", "/tool", "use /tool x {} inline", "/TOOL x"} {
		if call, ok := fastLocal().NextToolCall(llmtest.UserRequest(prompt)); ok {
			t.Errorf("%q: call %+v, want none", prompt, call)
		}
	}
}

// Call ids depend on the prompt and the step only.
func TestLocalToolIDs(t *testing.T) {
	p := fastLocal()
	prompt := "/tool a {}\n/tool a {}"
	req := llmtest.UserRequest(prompt)
	c0, _ := p.NextToolCall(req)
	again := toolStep(t, llmtest.Collect(t, t.Context(), llm.NewLocal(llm.LocalConfig{Rate: -1}), req))
	if again.ID != c0.ID {
		t.Errorf("ids %q and %q for the same request", c0.ID, again.ID)
	}
	// The history before the prompt does not matter.
	longer := llm.Request{Messages: []llm.Message{llm.Text(llm.RoleUser, "hi"), llm.Text(llm.RoleAssistant, "hello"), llm.Text(llm.RoleUser, prompt)}}
	if c, _ := p.NextToolCall(longer); c.ID != c0.ID {
		t.Errorf("id %q with earlier history, want %q", c.ID, c0.ID)
	}
	c1, ok := p.NextToolCall(withResults(req, c0, "x", false))
	if !ok || c1.ID == c0.ID {
		t.Errorf("second step: %+v ok %v, want a new id", c1, ok)
	}
	if c, _ := p.NextToolCall(llmtest.UserRequest(prompt + " ")); c.ID == c0.ID {
		t.Error("a different prompt gave the same id")
	}
	for _, id := range []string{c0.ID, c1.ID} {
		if !strings.HasPrefix(id, "call_") || strings.Trim(id[len("call_"):], "0123456789abcdef") != "" || len(id) != 21 {
			t.Errorf("id %q, want call_ and 16 hex digits", id)
		}
	}
}

// A crash in the middle of the final answer continues only that step's
// text.
func TestLocalToolAnswerContinuation(t *testing.T) {
	p := fastLocal()
	req := llmtest.UserRequest("/tool lookup {\"id\": 7}")
	call, _ := p.NextToolCall(req)
	req = withResults(req, call, "a long record with several words in it", false)
	full := p.Answer(req)
	if full != "The lookup tool returned: a long record with several words in it." {
		t.Fatalf("answer %q", full)
	}
	for _, cut := range []int{1, 5, len(full) / 2, len(full) - 1, len(full)} {
		partial := full[:cut]
		creq := req
		creq.Messages = append(append([]llm.Message(nil), req.Messages...),
			llm.Text(llm.RoleAssistant, partial), llm.Text(llm.RoleUser, llm.ContinuePrompt))
		creq.Continue = &llm.Continuation{PartialText: partial}
		r := llmtest.Collect(t, t.Context(), p, creq)
		if r.Err != nil {
			t.Fatalf("cut %d: %v", cut, r.Err)
		}
		if got := partial + r.Text; got != full {
			t.Fatalf("cut %d: partial+continuation = %q, want %q", cut, got, full)
		}
		if r.Finish.FinishReason != llm.FinishStop || r.Finish.Usage.OutputTokens != int64(len(r.Kinds(llm.TextDelta))) {
			t.Errorf("cut %d: finish %+v usage %+v", cut, r.Finish, r.Finish.Usage)
		}
	}
	req.Continue = &llm.Continuation{PartialText: "The lookup tool failed"}
	if e := llmtest.WantError(t, llmtest.Collect(t, t.Context(), p, req).Err, false); !errors.Is(e, llm.ErrContinuation) {
		t.Errorf("err = %v, want ErrContinuation", e)
	}
	// A tool call step has no text to continue.
	tool := llmtest.UserRequest("/tool lookup {}")
	tool.Continue = &llm.Continuation{PartialText: "x"}
	if e := llmtest.WantError(t, llmtest.Collect(t, t.Context(), p, tool).Err, false); !errors.Is(e, llm.ErrContinuation) {
		t.Errorf("err = %v, want ErrContinuation", e)
	}
}

// The chat layer stores tool input it cannot parse as invalid and answers
// it with an error; the model then sees its own raw input in the history.
func TestLocalToolInvalidInputRoundTrip(t *testing.T) {
	p := fastLocal()
	req := llmtest.UserRequest("/tool f not-json")
	call := toolStep(t, llmtest.Collect(t, t.Context(), p, req))
	if json.Valid(call.Input) {
		t.Fatalf("input %q is valid JSON", call.Input)
	}
	req = withResults(req, call, "invalid JSON input", true)
	if got, want := p.Answer(req), "The f tool failed: invalid JSON input."; got != want {
		t.Errorf("answer %q, want %q", got, want)
	}
}

// Without /tool lines the history of tools changes nothing.
func TestLocalNoToolLinesIgnoresTools(t *testing.T) {
	p := fastLocal()
	plain := llmtest.UserRequest("What is the capital of France?")
	withTools := plain
	withTools.Tools = []llm.Tool{{Name: "search"}}
	withTools.Messages = append([]llm.Message{
		llm.Text(llm.RoleUser, "/tool search {}"),
		{Role: llm.RoleAssistant, Parts: []llm.Part{{ToolCall: &llm.ToolCall{ID: "c", Name: "search"}}}},
		{Role: llm.RoleTool, Parts: []llm.Part{{ToolResult: &llm.ToolResult{CallID: "c", Output: "x"}}}},
	}, plain.Messages...)
	if got, want := p.Answer(withTools), p.Answer(plain); got != want {
		t.Errorf("answer %q, want %q", got, want)
	}
	if _, ok := p.NextToolCall(withTools); ok {
		t.Error("a call without /tool lines")
	}
	a, b := llmtest.Collect(t, t.Context(), p, plain), llmtest.Collect(t, t.Context(), p, withTools)
	if a.Deltas[0].ResponseID != b.Deltas[0].ResponseID || a.Text != b.Text {
		t.Errorf("streams differ: %q/%q vs %q/%q", a.Deltas[0].ResponseID, a.Text, b.Deltas[0].ResponseID, b.Text)
	}
}

// TestLocalAgentLines: "/agent <id> <text>" calls the agent tool, and a
// line starting with "+" joins the step of the line before it, so one step
// streams several calls and the answer quotes every result in line order.
func TestLocalAgentLines(t *testing.T) {
	p := fastLocal()
	prompt := "/agent child-a say \"a\" please\n+/agent child-b say b\n+ /tool clock {}\n/agent child-c say c\n+oops, not a call"
	req := llmtest.UserRequest(prompt)
	calls := p.NextToolCalls(req)
	if len(calls) != 3 {
		t.Fatalf("first step calls %+v, want child-a, child-b and clock", calls)
	}
	var in struct{ Agent, Text string }
	if err := json.Unmarshal(calls[0].Input, &in); err != nil || calls[0].Name != llm.LocalAgentTool || in.Agent != "child-a" || in.Text != `say "a" please` {
		t.Fatalf("first call %s(%s): %v", calls[0].Name, calls[0].Input, err)
	}
	if calls[2].Name != "clock" || string(calls[2].Input) != "{}" {
		t.Errorf("third call %s(%s)", calls[2].Name, calls[2].Input)
	}
	r := llmtest.Collect(t, t.Context(), p, req)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	done := r.Kinds(llm.ToolCallDone)
	if len(done) != 3 || r.Finish.FinishReason != llm.FinishToolCalls {
		t.Fatalf("step streamed %d calls, finish %+v", len(done), r.Finish)
	}
	for i, d := range done {
		if d.ToolCallID != calls[i].ID || string(d.Input) != string(calls[i].Input) {
			t.Errorf("call %d streamed as %+v, want %+v", i, d, calls[i])
		}
	}
	if got := r.Finish.Usage.OutputTokens; got != int64(len(r.Kinds(llm.ToolInputDelta))) {
		t.Errorf("output tokens %d, want the %d input pieces", got, len(r.Kinds(llm.ToolInputDelta)))
	}

	// The results of the first step's three calls, then child-c alone.
	req.Messages = append(req.Messages,
		llm.Message{Role: llm.RoleAssistant, Parts: []llm.Part{{ToolCall: &calls[0]}, {ToolCall: &calls[1]}, {ToolCall: &calls[2]}}},
		llm.Message{Role: llm.RoleTool, Parts: []llm.Part{
			{ToolResult: &llm.ToolResult{CallID: calls[0].ID, Output: "A"}},
			{ToolResult: &llm.ToolResult{CallID: calls[1].ID, Output: "B"}},
			{ToolResult: &llm.ToolResult{CallID: calls[2].ID, Output: "T"}},
		}})
	next := p.NextToolCalls(req)
	if len(next) != 1 || next[0].Name != llm.LocalAgentTool || !strings.Contains(string(next[0].Input), `"child-c"`) {
		t.Fatalf("second step calls %+v, want child-c", next)
	}
	req.Messages = append(req.Messages,
		llm.Message{Role: llm.RoleAssistant, Parts: []llm.Part{{ToolCall: &next[0]}}},
		llm.Message{Role: llm.RoleTool, Parts: []llm.Part{{ToolResult: &llm.ToolResult{CallID: next[0].ID, Output: "C"}}}})
	if got, want := p.Answer(req), "The agent tool returned: A. The agent tool returned: B. The clock tool returned: T. The agent tool returned: C."; got != want {
		t.Errorf("answer %q, want %q", got, want)
	}
}

// TestLocalQuotesSubagentAnswer: after a sub-agent call the local model
// quotes the child's text as text, not its JSON escaped; a long answer
// only by its beginning (the tool's output holds it whole). Other results
// and a failed call are quoted as they are.
func TestLocalQuotesSubagentAnswer(t *testing.T) {
	p := llm.NewLocal(llm.LocalConfig{Rate: -1})
	story := strings.Repeat("The keeper climbed the \"stairs\" again. ", 20)
	out := func(text string) string {
		b, _ := json.Marshal(map[string]any{"agent": "kid", "mode": "persistent", "callId": "c", "requestId": "r", "status": "completed", "text": text})
		return string(b)
	}
	for _, tt := range []struct {
		name   string
		result llm.ToolResult
		want   string
	}{
		{"short", llm.ToolResult{Output: out("Hello!\nI am \"kid\".")}, "The agent tool returned the answer of kid: Hello!\nI am \"kid\"."},
		{"no full stop", llm.ToolResult{Output: out("yes")}, "The agent tool returned the answer of kid: yes."},
		{"long", llm.ToolResult{Output: out(story)}, "The agent tool returned the answer of kid: " + strings.Repeat("The keeper climbed the \"stairs\" again. ", 6)[:6*39-1] + " (the beginning of 120 words; the whole answer is the tool's output)."},
		{"failed", llm.ToolResult{Output: "cycle: agent kid is already in the chain", IsError: true}, "The agent tool failed: cycle: agent kid is already in the chain."},
		{"not a child's", llm.ToolResult{Output: `{"echo":"x"}`}, `The agent tool returned: {"echo":"x"}.`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := llmtest.UserRequest("/agent kid say hello")
			calls := p.NextToolCalls(req)
			if len(calls) != 1 {
				t.Fatalf("calls %+v", calls)
			}
			r := tt.result
			r.CallID = calls[0].ID
			req.Messages = append(req.Messages,
				llm.Message{Role: llm.RoleAssistant, Parts: []llm.Part{{ToolCall: &calls[0]}}},
				llm.Message{Role: llm.RoleTool, Parts: []llm.Part{{ToolResult: &r}}})
			got := p.Answer(req)
			if got != tt.want {
				t.Errorf("answer\n%q\nwant\n%q", got, tt.want)
			}
			if strings.Contains(got, `\"`) || strings.Contains(got, `\n`) {
				t.Errorf("answer holds escaped JSON: %q", got)
			}
		})
	}
}
