package openai_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/chat/llm/llmtest"
	"github.com/forever-agents/forever/chat/llm/openai"
)

func newChat(t *testing.T, srv *llmtest.Server) *openai.ChatCompletions {
	t.Helper()
	p, err := openai.NewChatCompletions(openai.ChatCompletionsConfig{BaseURL: srv.URL + "/v1", Model: "llama3"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestChatCompletionsStream(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-must-not-leak")
	events := llmtest.NewChat("chatcmpl-1", "llama3").
		Reasoning("Let me ", "think.").
		Text("Hi", " there").
		ToolCall(0, "call_a", "lookup", `{"q":`, `"x"}`).
		ToolCall(1, "call_b", "other").
		Finish("tool_calls").
		Usage(7, 9).
		Done().Events()
	srv := llmtest.NewServer(t, func(llmtest.Request) llmtest.Reply { return llmtest.Stream(events) })
	req := llmtest.UserRequest("hello")
	req.System = "sys"
	req.MaxTokens = 100
	req.Tools = []llm.Tool{{Name: "lookup"}, {Name: "other"}}
	r := llmtest.Collect(t, t.Context(), newChat(t, srv), req)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if r.Text != "Hi there" || r.Reasoning != "Let me think." {
		t.Errorf("text %q reasoning %q", r.Text, r.Reasoning)
	}
	if d := r.Deltas[0]; d.Kind != llm.ResponseMeta || d.ResponseID != "chatcmpl-1" {
		t.Errorf("first delta %+v", d)
	}
	var args string
	for _, d := range r.Kinds(llm.ToolInputDelta) {
		if d.ToolCallID != "call_a" || d.ToolName != "lookup" {
			t.Errorf("tool input delta %+v", d)
		}
		args += d.Text
	}
	if args != `{"q":"x"}` {
		t.Errorf("tool input = %q", args)
	}
	calls := r.Kinds(llm.ToolCallDone)
	if len(calls) != 2 || calls[0].ToolCallID != "call_a" || string(calls[0].Input) != `{"q":"x"}` ||
		calls[1].ToolCallID != "call_b" || calls[1].ToolName != "other" || string(calls[1].Input) != `{}` {
		t.Errorf("tool calls = %+v", calls)
	}
	if r.Finish == nil || r.Finish.FinishReason != llm.FinishToolCalls || r.Finish.Usage == nil || *r.Finish.Usage != (llm.Usage{InputTokens: 7, OutputTokens: 9}) {
		t.Errorf("finish = %+v", r.Finish)
	}
	rq := srv.Requests()[0]
	if rq.Path != "/v1/chat/completions" {
		t.Errorf("path = %q", rq.Path)
	}
	if got := rq.Header.Get("Authorization"); got != "" {
		t.Errorf("Authorization = %q sent to a non-OpenAI host", got)
	}
	var body struct {
		Model         string `json:"model"`
		Stream        bool   `json:"stream"`
		MaxTokens     int    `json:"max_tokens"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		Messages []struct{ Role, Content string } `json:"messages"`
		Tools    []struct {
			Type     string
			Function struct{ Name string }
		} `json:"tools"`
	}
	if err := rq.Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body.Model != "llama3" || !body.Stream || !body.StreamOptions.IncludeUsage || body.MaxTokens != 100 ||
		len(body.Messages) != 2 || body.Messages[0].Role != "system" || body.Messages[1].Content != "hello" ||
		len(body.Tools) != 2 || body.Tools[0].Function.Name != "lookup" {
		t.Errorf("body = %s", rq.Body)
	}
}

func TestChatCompletionsHistory(t *testing.T) {
	srv := llmtest.NewServer(t, func(llmtest.Request) llmtest.Reply {
		return llmtest.Stream(llmtest.NewChat("c", "m").Text("ok").Finish("stop").Usage(1, 1).Done().Events())
	})
	req := llm.Request{Messages: []llm.Message{
		llm.Text(llm.RoleUser, "weather?"),
		{Role: llm.RoleAssistant, Parts: []llm.Part{{ToolCall: &llm.ToolCall{ID: "c1", Name: "w", Input: json.RawMessage(`{"city":"Oslo"}`)}}}},
		{Role: llm.RoleTool, Parts: []llm.Part{{ToolResult: &llm.ToolResult{CallID: "c1", Output: "cold"}}}},
	}, Continue: &llm.Continuation{PartialText: "It is"}}
	r := llmtest.Collect(t, t.Context(), newChat(t, srv), req)
	if r.Err != nil || r.Text != "ok" || r.Finish.FinishReason != llm.FinishStop {
		t.Fatalf("r = %+v", r)
	}
	var body struct {
		Messages []struct {
			Role       string `json:"role"`
			Content    string `json:"content"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string
				Function struct{ Name, Arguments string }
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	if err := srv.Requests()[0].Decode(&body); err != nil {
		t.Fatal(err)
	}
	m := body.Messages
	if len(m) != 5 || m[1].Role != "assistant" || len(m[1].ToolCalls) != 1 || m[1].ToolCalls[0].Function.Arguments != `{"city":"Oslo"}` ||
		m[2].Role != "tool" || m[2].ToolCallID != "c1" || m[2].Content != "cold" ||
		m[3].Role != "assistant" || m[3].Content != "It is" || m[4].Role != "user" || m[4].Content != llm.ContinuePrompt {
		t.Errorf("messages = %+v", m)
	}
}

func TestChatCompletionsFailures(t *testing.T) {
	tests := []struct {
		name      string
		reply     llmtest.Reply
		retryable bool
		status    int
		text      string
	}{
		{"error payload", llmtest.Stream(llmtest.NewChat("c", "m").Text("pa").Error("server_error", "", "model crashed").Events()), true, 0, "pa"},
		{"cut connection", llmtest.Stream(llmtest.NewChat("c", "m").Text("pa").Cut().Events()), true, 0, "pa"},
		{"no finish", llmtest.Stream(llmtest.NewChat("c", "m").Text("pa").Done().Events()), true, 0, "pa"},
		{"401", llmtest.OpenAIError(401, "invalid_request_error", "invalid_api_key", "bad key"), false, 401, ""},
		{"404 model", llmtest.OpenAIError(404, "invalid_request_error", "model_not_found", "no model"), false, 404, ""},
		{"429", llmtest.OpenAIError(429, "rate_limit", "", "slow"), true, 429, ""},
		{"500", llmtest.OpenAIError(500, "server_error", "", "oops"), true, 500, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.NewServer(t, func(llmtest.Request) llmtest.Reply { return tt.reply })
			r := llmtest.Collect(t, t.Context(), newChat(t, srv), llmtest.UserRequest("x"))
			t.Logf("err: %v", r.Err)
			e := llmtest.WantError(t, r.Err, tt.retryable)
			if e.Status != tt.status || r.Text != tt.text || e.Provider != "chatcompletions" {
				t.Errorf("err %#v text %q", e, r.Text)
			}
		})
	}
}

func TestChatCompletionsKey(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	_, err := openai.NewChatCompletions(openai.ChatCompletionsConfig{Model: "gpt"})
	if err == nil || err.Error() != "llm: chatcompletions: OPENAI_API_KEY is not set" || !errors.Is(err, llm.ErrMissingAPIKey) {
		t.Fatalf("err = %v", err)
	}
	if _, err := openai.NewChatCompletions(openai.ChatCompletionsConfig{BaseURL: "https://api.openai.com/v1", Model: "gpt"}); !errors.Is(err, llm.ErrMissingAPIKey) {
		t.Fatalf("explicit openai URL: err = %v", err)
	}
	if _, err := openai.NewChatCompletions(openai.ChatCompletionsConfig{BaseURL: "http://localhost:11434/v1", Model: "llama3"}); err != nil {
		t.Fatalf("ollama without key: %v", err)
	}

	srv := llmtest.NewServer(t, func(llmtest.Request) llmtest.Reply {
		return llmtest.Stream(llmtest.NewChat("c", "m").Text("ok").Finish("stop").Done().Events())
	})
	p, err := openai.NewChatCompletions(openai.ChatCompletionsConfig{APIKey: "local-key", BaseURL: srv.URL + "/v1", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	r := llmtest.Collect(t, t.Context(), p, llmtest.UserRequest("x"))
	if r.Err != nil || r.Finish == nil || r.Finish.Usage != nil {
		t.Fatalf("r = %+v (usage must be nil when the server sends none)", r)
	}
	if got := srv.Requests()[0].Header.Get("Authorization"); got != "Bearer local-key" {
		t.Errorf("Authorization = %q", got)
	}
}
