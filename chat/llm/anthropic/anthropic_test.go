package anthropic_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/chat/llm/anthropic"
	"github.com/forever-agents/forever/chat/llm/llmtest"
)

func newAnthropic(t *testing.T, srv *llmtest.Server) *anthropic.Provider {
	t.Helper()
	p, err := anthropic.New(anthropic.Config{APIKey: "ak-test", BaseURL: srv.URL, Model: "claude-test"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAnthropicStream(t *testing.T) {
	events := llmtest.NewAnthropic("msg_1", "claude-test", 25).
		Thinking("Hmm, ", "ok.").
		Text("Hello", " there.").
		ToolUse("toolu_1", "search", `{"q": `, `"go"}`).
		Stop("tool_use", 42).Events()
	srv := llmtest.NewServer(t, func(llmtest.Request) llmtest.Reply { return llmtest.Stream(events) })
	req := llmtest.UserRequest("hi")
	req.System = "sys"
	req.IdempotencyKey = "k1"
	req.Tools = []llm.Tool{{Name: "search", Description: "web", Schema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`)}}
	r := llmtest.Collect(t, t.Context(), newAnthropic(t, srv), req)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if r.Text != "Hello there." || r.Reasoning != "Hmm, ok." {
		t.Errorf("text %q reasoning %q", r.Text, r.Reasoning)
	}
	if d := r.Deltas[0]; d.Kind != llm.ResponseMeta || d.ResponseID != "msg_1" {
		t.Errorf("first delta %+v", d)
	}
	var args string
	for _, d := range r.Kinds(llm.ToolInputDelta) {
		if d.ToolCallID != "toolu_1" || d.ToolName != "search" {
			t.Errorf("tool input delta %+v", d)
		}
		args += d.Text
	}
	if args != `{"q": "go"}` {
		t.Errorf("tool input = %q", args)
	}
	calls := r.Kinds(llm.ToolCallDone)
	if len(calls) != 1 || calls[0].ToolCallID != "toolu_1" || string(calls[0].Input) != `{"q": "go"}` {
		t.Errorf("calls = %+v", calls)
	}
	if r.Finish == nil || r.Finish.FinishReason != llm.FinishToolCalls || *r.Finish.Usage != (llm.Usage{InputTokens: 25, OutputTokens: 42}) {
		t.Errorf("finish = %+v", r.Finish)
	}
	rq := srv.Requests()[0]
	if rq.Path != "/v1/messages" || rq.Header.Get("X-Api-Key") != "ak-test" || rq.Header.Get("Idempotency-Key") != "k1" {
		t.Errorf("request %s headers %v", rq.Path, rq.Header)
	}
	var body struct {
		Model     string `json:"model"`
		MaxTokens int    `json:"max_tokens"`
		Stream    bool   `json:"stream"`
		System    []struct{ Text string }
		Tools     []struct {
			Name        string `json:"name"`
			InputSchema struct {
				Type     string   `json:"type"`
				Required []string `json:"required"`
			} `json:"input_schema"`
		} `json:"tools"`
	}
	if err := rq.Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body.Model != "claude-test" || body.MaxTokens != anthropic.DefaultMaxTokens || !body.Stream ||
		len(body.System) != 1 || body.System[0].Text != "sys" || len(body.Tools) != 1 ||
		body.Tools[0].InputSchema.Type != "object" || len(body.Tools[0].InputSchema.Required) != 1 {
		t.Errorf("body = %s", rq.Body)
	}
}

// The continuation request carries the partial answer as an assistant
// message followed by a user continue message: never a prefill.
func TestAnthropicContinuationRequest(t *testing.T) {
	srv := llmtest.NewServer(t, func(r llmtest.Request) llmtest.Reply {
		var body struct {
			Messages []struct {
				Role    string `json:"role"`
				Content []struct {
					Type, Text string
				} `json:"content"`
			} `json:"messages"`
		}
		if err := r.Decode(&body); err != nil {
			return llmtest.AnthropicError(400, "invalid_request_error", err.Error())
		}
		m := body.Messages
		n := len(m)
		if n < 3 || m[n-1].Role != "user" || m[n-1].Content[0].Text != llm.ContinuePrompt ||
			m[n-2].Role != "assistant" || m[n-2].Content[0].Text != "Once upon a" || m[n-3].Role != "user" {
			return llmtest.AnthropicError(400, "invalid_request_error", "bad continuation shape: "+string(r.Body))
		}
		return llmtest.Stream(llmtest.NewAnthropic("msg_2", "m", 9).Text(" time.").Stop("end_turn", 2).Events())
	})
	req := llmtest.UserRequest("Tell a story")
	req.Continue = &llm.Continuation{PartialText: "Once upon a"}
	r := llmtest.Collect(t, t.Context(), newAnthropic(t, srv), req)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if got, want := req.Continue.PartialText+r.Text, "Once upon a time."; got != want {
		t.Errorf("text = %q, want %q", got, want)
	}
	if r.Finish.FinishReason != llm.FinishStop {
		t.Errorf("finish = %+v", r.Finish)
	}
}

func TestAnthropicFailures(t *testing.T) {
	tests := []struct {
		name      string
		reply     llmtest.Reply
		retryable bool
		status    int
		code      string
		text      string
	}{
		{"overloaded event", llmtest.Stream(llmtest.NewAnthropic("m", "m", 1).Text("par", "tial").Error("overloaded_error", "Overloaded").Events()), true, 0, "overloaded_error", "partial"},
		{"invalid event", llmtest.Stream(llmtest.NewAnthropic("m", "m", 1).Error("invalid_request_error", "nope").Events()), false, 0, "invalid_request_error", ""},
		{"cut connection", llmtest.Stream(llmtest.NewAnthropic("m", "m", 1).Text("par").Cut().Events()), true, 0, "", "par"},
		{"401", llmtest.AnthropicError(401, "authentication_error", "invalid x-api-key"), false, 401, "authentication_error", ""},
		{"400", llmtest.AnthropicError(400, "invalid_request_error", "bad"), false, 400, "invalid_request_error", ""},
		{"429", llmtest.AnthropicError(429, "rate_limit_error", "slow"), true, 429, "rate_limit_error", ""},
		{"529", llmtest.AnthropicError(529, "overloaded_error", "Overloaded"), true, 529, "overloaded_error", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.NewServer(t, func(llmtest.Request) llmtest.Reply { return tt.reply })
			r := llmtest.Collect(t, t.Context(), newAnthropic(t, srv), llmtest.UserRequest("x"))
			t.Logf("err: %v", r.Err)
			e := llmtest.WantError(t, r.Err, tt.retryable)
			if e.Status != tt.status || e.Code != tt.code || r.Text != tt.text || e.Provider != "anthropic" {
				t.Errorf("err %#v (%v) text %q", e, e, r.Text)
			}
		})
	}
}

func TestAnthropicConfig(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "")
	_, err := anthropic.New(anthropic.Config{Model: "m"})
	if err == nil || err.Error() != "llm: anthropic: ANTHROPIC_API_KEY is not set" || !errors.Is(err, llm.ErrMissingAPIKey) {
		t.Fatalf("err = %v", err)
	}
	t.Setenv("ANTHROPIC_API_KEY", "from-env")
	if _, err := anthropic.New(anthropic.Config{Model: "m"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []anthropic.Config{{}, {Model: "m", ThinkingBudget: 10}, {Model: "m", MaxTokens: -1}} {
		if _, err := anthropic.New(c); !errors.Is(err, llm.ErrInvalidConfig) {
			t.Errorf("%+v: err = %v, want ErrInvalidConfig", c, err)
		}
	}
}
