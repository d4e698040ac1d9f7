package llmtest_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strconv"
	"testing"

	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/chat/llm/anthropic"
	"github.com/forever-agents/forever/chat/llm/llmtest"
	"github.com/forever-agents/forever/chat/llm/openai"
)

// agentHistory is a request as the chat layer builds it in the second step
// of an agent loop: the user message, the assistant message of the first
// step (text and two tool calls, one with input that is not JSON), and a
// tool message with both results, one of them an error.
func agentHistory() llm.Request {
	return llm.Request{Messages: []llm.Message{
		llm.Text(llm.RoleUser, "weather in Oslo and Rome?"),
		{Role: llm.RoleAssistant, Parts: []llm.Part{
			{Text: "Checking."},
			{ToolCall: &llm.ToolCall{ID: "call_1", Name: "weather", Input: json.RawMessage(`{"city":"Oslo"}`)}},
			{ToolCall: &llm.ToolCall{ID: "call_2", Name: "weather", Input: json.RawMessage(`{"city":"Rome"`)}},
		}},
		{Role: llm.RoleTool, Parts: []llm.Part{
			{ToolResult: &llm.ToolResult{CallID: "call_1", Output: "snow, -3 °C"}},
			{ToolResult: &llm.ToolResult{CallID: "call_2", Output: "invalid JSON input", IsError: true}},
		}},
	}}
}

// wrappedInput is how call_2's input, which is not JSON, goes back.
const wrappedInput = `{"_raw_input":"{\"city\":\"Rome\""}`

func TestOpenAIResponsesToolHistory(t *testing.T) {
	srv := llmtest.NewServer(t, func(llmtest.Request) llmtest.Reply {
		return llmtest.Stream(llmtest.NewResponses("r", "m", false).Text("ok").Completed(1, 1).Events())
	})
	r := llmtest.Collect(t, t.Context(), newResponses(t, srv, false), agentHistory())
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	var body struct {
		Input []map[string]any `json:"input"`
	}
	if err := srv.Requests()[0].Decode(&body); err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{
		{"role": "user", "content": "weather in Oslo and Rome?"},
		{"role": "assistant", "content": "Checking."},
		{"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": `{"city":"Oslo"}`},
		{"type": "function_call", "call_id": "call_2", "name": "weather", "arguments": wrappedInput},
		{"type": "function_call_output", "call_id": "call_1", "output": "snow, -3 °C"},
		{"type": "function_call_output", "call_id": "call_2", "output": "invalid JSON input"},
	}
	if len(body.Input) != len(want) {
		t.Fatalf("input = %s", srv.Requests()[0].Body)
	}
	for i, w := range want {
		for k, v := range w {
			if got := body.Input[i][k]; got != v {
				t.Errorf("input[%d].%s = %v, want %v", i, k, got, v)
			}
		}
	}
}

func TestChatCompletionsToolHistory(t *testing.T) {
	srv := llmtest.NewServer(t, func(llmtest.Request) llmtest.Reply {
		return llmtest.Stream(llmtest.NewChat("c", "m").Text("ok").Finish("stop").Done().Events())
	})
	r := llmtest.Collect(t, t.Context(), newChat(t, srv), agentHistory())
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	type call struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	var body struct {
		Messages []struct {
			Role       string `json:"role"`
			Content    string `json:"content"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []call `json:"tool_calls"`
		} `json:"messages"`
	}
	if err := srv.Requests()[0].Decode(&body); err != nil {
		t.Fatal(err)
	}
	m := body.Messages
	if len(m) != 4 {
		t.Fatalf("messages = %s", srv.Requests()[0].Body)
	}
	if m[0].Role != "user" || m[1].Role != "assistant" || m[1].Content != "Checking." || len(m[1].ToolCalls) != 2 {
		t.Fatalf("messages = %s", srv.Requests()[0].Body)
	}
	for i, w := range []struct{ id, args string }{{"call_1", `{"city":"Oslo"}`}, {"call_2", wrappedInput}} {
		c := m[1].ToolCalls[i]
		if c.ID != w.id || c.Type != "function" || c.Function.Name != "weather" || c.Function.Arguments != w.args {
			t.Errorf("tool_calls[%d] = %+v, want id %s arguments %s", i, c, w.id, w.args)
		}
	}
	for i, w := range []struct{ id, content string }{{"call_1", "snow, -3 °C"}, {"call_2", "invalid JSON input"}} {
		if got := m[2+i]; got.Role != "tool" || got.ToolCallID != w.id || got.Content != w.content {
			t.Errorf("message %d = %+v, want tool %s %q", 2+i, got, w.id, w.content)
		}
	}
}

func TestAnthropicToolHistory(t *testing.T) {
	srv := llmtest.NewServer(t, func(llmtest.Request) llmtest.Reply {
		return llmtest.Stream(llmtest.NewAnthropic("msg", "m", 1).Text("ok").Stop("end_turn", 1).Events())
	})
	r := llmtest.Collect(t, t.Context(), newAnthropic(t, srv), agentHistory())
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	var body struct {
		Messages []struct {
			Role    string           `json:"role"`
			Content []map[string]any `json:"content"`
		} `json:"messages"`
	}
	if err := srv.Requests()[0].Decode(&body); err != nil {
		t.Fatal(err)
	}
	m := body.Messages
	if len(m) != 3 || m[0].Role != "user" || m[1].Role != "assistant" || m[2].Role != "user" ||
		len(m[1].Content) != 3 || len(m[2].Content) != 2 {
		t.Fatalf("messages = %s", srv.Requests()[0].Body)
	}
	want := [][]map[string]any{1: {
		{"type": "text", "text": "Checking."},
		{"type": "tool_use", "id": "call_1", "name": "weather", "input": map[string]any{"city": "Oslo"}},
		{"type": "tool_use", "id": "call_2", "name": "weather", "input": map[string]any{"_raw_input": `{"city":"Rome"`}},
	}, 2: {
		{"type": "tool_result", "tool_use_id": "call_1", "content": []any{map[string]any{"type": "text", "text": "snow, -3 °C"}}},
		{"type": "tool_result", "tool_use_id": "call_2", "is_error": true, "content": []any{map[string]any{"type": "text", "text": "invalid JSON input"}}},
	}}
	for i := 1; i <= 2; i++ {
		for j, w := range want[i] {
			for k, v := range w {
				if got := m[i].Content[j][k]; !reflect.DeepEqual(got, v) {
					t.Errorf("messages[%d].content[%d].%s = %#v, want %#v", i, j, k, got, v)
				}
			}
		}
	}
	if e, ok := m[2].Content[0]["is_error"]; ok && e != false {
		t.Errorf("is_error of a good llmtest.Result = %v", e)
	}
}

// Every provider streams a tool call as ToolInputDelta pieces naming the
// call, then ToolCallDone with the whole input, then Finish with
// FinishToolCalls.
func TestToolCallStreams(t *testing.T) {
	args := []string{`{"ci`, `ty": "Os`, `lo"}`}
	tests := []struct {
		name  string
		reply llmtest.Reply
		p     func(*testing.T, *llmtest.Server) llm.Provider
	}{
		{"responses", llmtest.Stream(llmtest.NewResponses("r", "m", false).Text("Let me look.").FunctionCall("call_w", "weather", args...).Completed(1, 1).Events()),
			func(t *testing.T, s *llmtest.Server) llm.Provider { return newResponses(t, s, false) }},
		{"chat", llmtest.Stream(llmtest.NewChat("c", "m").Text("Let me look.").ToolCall(0, "call_w", "weather", args...).Finish("tool_calls").Usage(1, 1).Done().Events()),
			func(t *testing.T, s *llmtest.Server) llm.Provider { return newChat(t, s) }},
		// Some servers (older Ollama) report tool calls with "stop".
		{"chat stop", llmtest.Stream(llmtest.NewChat("c", "m").Text("Let me look.").ToolCall(0, "call_w", "weather", args...).Finish("stop").Done().Events()),
			func(t *testing.T, s *llmtest.Server) llm.Provider { return newChat(t, s) }},
		// The API may open tool input with an empty fragment.
		{"anthropic", llmtest.Stream(llmtest.NewAnthropic("msg", "m", 1).Text("Let me look.").ToolUse("call_w", "weather", append([]string{""}, args...)...).Stop("tool_use", 1).Events()),
			func(t *testing.T, s *llmtest.Server) llm.Provider { return newAnthropic(t, s) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.NewServer(t, func(llmtest.Request) llmtest.Reply { return tt.reply })
			r := llmtest.Collect(t, t.Context(), tt.p(t, srv), llmtest.UserRequest("weather?"))
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			var kinds []llm.DeltaKind
			var pieces []string
			for _, d := range r.Deltas {
				if d.Kind == llm.ToolInputDelta {
					if d.ToolCallID != "call_w" || d.ToolName != "weather" {
						t.Errorf("piece %+v without the call's id and name", d)
					}
					pieces = append(pieces, d.Text)
				}
				if d.Kind != llm.ResponseMeta && (len(kinds) == 0 || kinds[len(kinds)-1] != d.Kind) {
					kinds = append(kinds, d.Kind)
				}
			}
			if want := []llm.DeltaKind{llm.TextDelta, llm.ToolInputDelta, llm.ToolCallDone, llm.Finish}; !reflect.DeepEqual(kinds, want) {
				t.Errorf("kinds %v, want %v", kinds, want)
			}
			if !reflect.DeepEqual(pieces, args) {
				t.Errorf("pieces %q, want %q", pieces, args)
			}
			done := r.Kinds(llm.ToolCallDone)
			if len(done) != 1 || done[0].ToolCallID != "call_w" || done[0].ToolName != "weather" || string(done[0].Input) != `{"city": "Oslo"}` {
				t.Errorf("ToolCallDone = %+v", done)
			}
			if r.Finish.FinishReason != llm.FinishToolCalls {
				t.Errorf("FinishReason = %q, want %q", r.Finish.FinishReason, llm.FinishToolCalls)
			}
		})
	}
}

// Some Chat Completions servers leave "index" out of streamed tool calls,
// so every call reads as index 0; each new id starts a new call.
func TestChatCompletionsToolCallsWithoutIndex(t *testing.T) {
	chunk := func(delta string, finish string) llmtest.Event {
		f := "null"
		if finish != "" {
			f = strconv.Quote(finish)
		}
		return llmtest.Event{Seq: -1, Data: `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + f + `}]}`}
	}
	events := []llmtest.Event{
		chunk(`{"role":"assistant","content":""}`, ""),
		chunk(`{"tool_calls":[{"id":"call_a","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Oslo\"}"}}]}`, ""),
		chunk(`{"tool_calls":[{"id":"call_b","type":"function","function":{"name":"time","arguments":"{}"}}]}`, ""),
		chunk(`{}`, "tool_calls"),
		{Seq: -1, Data: "[DONE]"},
	}
	srv := llmtest.NewServer(t, func(llmtest.Request) llmtest.Reply { return llmtest.Stream(events) })
	r := llmtest.Collect(t, t.Context(), newChat(t, srv), llmtest.UserRequest("x"))
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	done := r.Kinds(llm.ToolCallDone)
	if len(done) != 2 || done[0].ToolCallID != "call_a" || done[0].ToolName != "weather" || string(done[0].Input) != `{"city":"Oslo"}` ||
		done[1].ToolCallID != "call_b" || done[1].ToolName != "time" || string(done[1].Input) != `{}` {
		t.Errorf("ToolCallDone = %+v", done)
	}
	for _, d := range r.Kinds(llm.ToolInputDelta) {
		if (d.ToolCallID == "call_a") != (d.ToolName == "weather") {
			t.Errorf("piece %+v names the wrong call", d)
		}
	}
}

// A background stream cut in the middle of a function call's arguments
// resumes after the output_item.added that named the call; the pieces that
// follow still carry its id and name, from the retrieved response.
func TestOpenAIResponsesResumeInsideToolCall(t *testing.T) {
	b := llmtest.NewResponses("resp_t", "m", true).FunctionCall("call_w", "weather", `{"ci`, `ty": "Os`, `lo"}`).Completed(2, 3)
	events := b.Events()
	cutAt := 4 // created, in_progress, item added, first arguments delta
	first := append(append([]llmtest.Event(nil), events[:cutAt]...), llmtest.Cut())
	// The stored response while running holds the call as far as it got.
	var running map[string]any
	if err := json.Unmarshal([]byte(b.Object("in_progress")), &running); err != nil {
		t.Fatal(err)
	}
	running["output"] = []any{map[string]any{"id": "fc_0", "type": "function_call", "status": "in_progress", "arguments": `{"ci`, "call_id": "call_w", "name": "weather"}}
	runningJSON, _ := json.Marshal(running)
	srv := llmtest.NewServer(t, func(r llmtest.Request) llmtest.Reply {
		switch {
		case r.Method == http.MethodPost:
			return llmtest.Stream(first)
		case r.Method == http.MethodGet && r.Query.Get("stream") == "true":
			after, _ := strconv.ParseInt(r.Query.Get("starting_after"), 10, 64)
			return llmtest.Stream(llmtest.After(events, after))
		default:
			return llmtest.JSONReply(200, string(runningJSON))
		}
	})
	p := newResponses(t, srv, true)
	r1 := llmtest.Collect(t, t.Context(), p, llmtest.UserRequest("weather?"))
	llmtest.WantError(t, r1.Err, true)
	req := llmtest.UserRequest("weather?")
	req.Continue = &llm.Continuation{ResponseID: "resp_t", SequenceNumber: r1.Deltas[len(r1.Deltas)-1].SequenceNumber}
	r2 := llmtest.Collect(t, t.Context(), p, req)
	if r2.Err != nil {
		t.Fatal(r2.Err)
	}
	pieces := r2.Kinds(llm.ToolInputDelta)
	if len(pieces) != 2 {
		t.Fatalf("resumed pieces %+v", pieces)
	}
	for _, d := range pieces {
		if d.ToolCallID != "call_w" || d.ToolName != "weather" {
			t.Errorf("resumed piece %+v without the call's id and name", d)
		}
	}
	done := r2.Kinds(llm.ToolCallDone)
	if len(done) != 1 || string(done[0].Input) != `{"city": "Oslo"}` || r2.Finish.FinishReason != llm.FinishToolCalls {
		t.Errorf("done %+v finish %+v", done, r2.Finish)
	}
}

func newResponses(t *testing.T, srv *llmtest.Server, background bool) *openai.Responses {
	t.Helper()
	p, err := openai.NewResponses(openai.ResponsesConfig{APIKey: "sk-test", BaseURL: srv.URL + "/v1", Model: "gpt-test", Background: background})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newChat(t *testing.T, srv *llmtest.Server) *openai.ChatCompletions {
	t.Helper()
	p, err := openai.NewChatCompletions(openai.ChatCompletionsConfig{BaseURL: srv.URL + "/v1", Model: "llama3"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newAnthropic(t *testing.T, srv *llmtest.Server) *anthropic.Provider {
	t.Helper()
	p, err := anthropic.New(anthropic.Config{APIKey: "ak-test", BaseURL: srv.URL, Model: "claude-test"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
