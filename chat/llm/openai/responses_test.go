package openai_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/chat/llm/llmtest"
	"github.com/forever-agents/forever/chat/llm/openai"
)

func newResponses(t *testing.T, srv *llmtest.Server, background bool) *openai.Responses {
	t.Helper()
	p, err := openai.NewResponses(openai.ResponsesConfig{APIKey: "sk-test", BaseURL: srv.URL + "/v1", Model: "gpt-test", Background: background})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOpenAIResponsesStream(t *testing.T) {
	b := llmtest.NewResponses("resp_1", "gpt-test", false).
		Reasoning("Thinking ", "hard.").
		Text("Hello", ", ", "world.").
		FunctionCall("call_1", "get_weather", `{"city":`, `"Paris"}`).
		Completed(11, 22)
	srv := llmtest.NewServer(t, func(r llmtest.Request) llmtest.Reply { return llmtest.Stream(b.Events()) })
	p := newResponses(t, srv, false)

	req := llmtest.UserRequest("hi")
	req.System = "be brief"
	req.IdempotencyKey = "turn-1"
	req.Tools = []llm.Tool{{Name: "get_weather", Description: "weather", Schema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)}}
	r := llmtest.Collect(t, t.Context(), p, req)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if got, want := r.Text, "Hello, world."; got != want {
		t.Errorf("text = %q, want %q", got, want)
	}
	if got, want := r.Reasoning, "Thinking hard."; got != want {
		t.Errorf("reasoning = %q, want %q", got, want)
	}
	if d := r.Deltas[0]; d.Kind != llm.ResponseMeta || d.ResponseID != "resp_1" || d.SequenceNumber != 0 {
		t.Errorf("first delta = %+v, want ResponseMeta resp_1 seq 0", d)
	}
	var last int64 = -1
	for _, d := range r.Deltas {
		if d.ResponseID != "resp_1" || d.SequenceNumber <= last {
			t.Fatalf("delta %+v: want response id and increasing sequence numbers (last %d)", d, last)
		}
		last = d.SequenceNumber
	}
	var args string
	for _, d := range r.Kinds(llm.ToolInputDelta) {
		if d.ToolCallID != "call_1" || d.ToolName != "get_weather" {
			t.Errorf("tool input delta %+v", d)
		}
		args += d.Text
	}
	if args != `{"city":"Paris"}` {
		t.Errorf("tool input deltas = %q", args)
	}
	calls := r.Kinds(llm.ToolCallDone)
	if len(calls) != 1 || calls[0].ToolCallID != "call_1" || calls[0].ToolName != "get_weather" || string(calls[0].Input) != `{"city":"Paris"}` {
		t.Errorf("tool calls = %+v", calls)
	}
	if r.Finish == nil || *r.Finish.Usage != (llm.Usage{InputTokens: 11, OutputTokens: 22}) || r.Finish.FinishReason != llm.FinishToolCalls {
		t.Errorf("finish = %+v", r.Finish)
	}

	reqs := srv.Requests()
	if len(reqs) != 1 || reqs[0].Method != http.MethodPost || reqs[0].Path != "/v1/responses" {
		t.Fatalf("requests = %+v", reqs)
	}
	if got := reqs[0].Header.Get("Authorization"); got != "Bearer sk-test" {
		t.Errorf("Authorization = %q", got)
	}
	if got := reqs[0].Header.Get("Idempotency-Key"); got != "turn-1" {
		t.Errorf("Idempotency-Key = %q", got)
	}
	var body struct {
		Model        string `json:"model"`
		Instructions string `json:"instructions"`
		Stream       bool   `json:"stream"`
		Background   *bool  `json:"background"`
		Input        []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"input"`
		Tools []struct {
			Type, Name string
		} `json:"tools"`
	}
	if err := reqs[0].Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body.Model != "gpt-test" || body.Instructions != "be brief" || !body.Stream || body.Background != nil ||
		len(body.Input) != 1 || body.Input[0].Role != "user" || body.Input[0].Content != "hi" ||
		len(body.Tools) != 1 || body.Tools[0].Name != "get_weather" || body.Tools[0].Type != "function" {
		t.Errorf("request body = %s", reqs[0].Body)
	}
}

func TestOpenAIResponsesFailures(t *testing.T) {
	tests := []struct {
		name      string
		reply     llmtest.Reply
		retryable bool
		status    int
		code      string
		text      string
		cause     error
	}{
		{"error event", llmtest.Stream(llmtest.NewResponses("r", "m", false).Text("par", "tial").Error("server_error", "boom").Events()), true, 0, "server_error", "partial", nil},
		{"cut connection", llmtest.Stream(llmtest.NewResponses("r", "m", false).Text("par", "tial").Cut().Events()), true, 0, "", "partial", nil},
		{"closed early", llmtest.Stream(llmtest.NewResponses("r", "m", false).Text("partial").Events()), true, 0, "", "partial", llm.ErrStreamCut},
		{"401", llmtest.OpenAIError(401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided"), false, 401, "invalid_api_key", "", nil},
		{"400", llmtest.OpenAIError(400, "invalid_request_error", "", "bad"), false, 400, "invalid_request_error", "", nil},
		{"429", llmtest.OpenAIError(429, "requests", "rate_limit_exceeded", "slow down"), true, 429, "rate_limit_exceeded", "", nil},
		{"503", llmtest.OpenAIError(503, "server_error", "", "unavailable"), true, 503, "server_error", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.NewServer(t, func(llmtest.Request) llmtest.Reply { return tt.reply })
			r := llmtest.Collect(t, t.Context(), newResponses(t, srv, false), llmtest.UserRequest("hi"))
			t.Logf("err: %v", r.Err)
			e := llmtest.WantError(t, r.Err, tt.retryable)
			if e.Status != tt.status || e.Code != tt.code || e.Provider != "openai" {
				t.Errorf("err = %#v, want status %d code %q", e, tt.status, tt.code)
			}
			if r.Text != tt.text {
				t.Errorf("text before error = %q, want %q", r.Text, tt.text)
			}
			if tt.cause != nil && !errors.Is(r.Err, tt.cause) {
				t.Errorf("err = %v, want cause %v", r.Err, tt.cause)
			}
			if r.Finish != nil {
				t.Error("Finish delta on a failed stream")
			}
		})
	}
}

func TestOpenAIResponsesMissingKey(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	_, err := openai.NewResponses(openai.ResponsesConfig{Model: "m"})
	if err == nil || err.Error() != "llm: openai: OPENAI_API_KEY is not set" || !errors.Is(err, llm.ErrMissingAPIKey) {
		t.Fatalf("err = %v", err)
	}
	t.Setenv("OPENAI_API_KEY", "sk-env")
	if _, err := openai.NewResponses(openai.ResponsesConfig{Model: "m"}); err != nil {
		t.Fatalf("key from env: %v", err)
	}
	if _, err := openai.NewResponses(openai.ResponsesConfig{}); !errors.Is(err, llm.ErrInvalidConfig) {
		t.Fatalf("no model: err = %v", err)
	}
}

// A background response whose stream was cut is resumed with
// GET /responses/{id}?stream=true&starting_after=<last sequence number>.
func TestOpenAIResponsesBackgroundResume(t *testing.T) {
	full := llmtest.NewResponses("resp_bg", "m", true).Text("One ", "two ", "three ", "four.").Completed(3, 4)
	events := full.Events()
	cutAt := 6 // created, in_progress, item added, part added, "One ", "two "
	first := append(append([]llmtest.Event(nil), events[:cutAt]...), llmtest.Cut())
	srv := llmtest.NewServer(t, func(r llmtest.Request) llmtest.Reply {
		switch {
		case r.Method == http.MethodPost && r.Path == "/v1/responses":
			return llmtest.Stream(first)
		case r.Method == http.MethodGet && r.Path == "/v1/responses/resp_bg" && r.Query.Get("stream") == "true":
			after, err := strconv.ParseInt(r.Query.Get("starting_after"), 10, 64)
			if err != nil {
				return llmtest.OpenAIError(400, "invalid_request_error", "", "starting_after missing")
			}
			return llmtest.Stream(llmtest.After(events, after))
		case r.Method == http.MethodGet && r.Path == "/v1/responses/resp_bg":
			return llmtest.JSONReply(200, full.Object("in_progress"))
		}
		return llmtest.OpenAIError(404, "invalid_request_error", "", "no route "+r.Path)
	})
	p := newResponses(t, srv, true)

	r1 := llmtest.Collect(t, t.Context(), p, llmtest.UserRequest("count"))
	llmtest.WantError(t, r1.Err, true)
	if got, want := r1.Text, "One two "; got != want {
		t.Fatalf("first attempt text = %q, want %q", got, want)
	}
	lastSeq := r1.Deltas[len(r1.Deltas)-1].SequenceNumber
	var post struct {
		Background bool `json:"background"`
		Store      bool `json:"store"`
	}
	if err := srv.Requests()[0].Decode(&post); err != nil || !post.Background || !post.Store {
		t.Fatalf("create request: background=%v store=%v err=%v", post.Background, post.Store, err)
	}

	req := llmtest.UserRequest("count")
	req.Continue = &llm.Continuation{ResponseID: r1.Deltas[0].ResponseID, SequenceNumber: lastSeq, PartialText: r1.Text}
	r2 := llmtest.Collect(t, t.Context(), p, req)
	if r2.Err != nil {
		t.Fatal(r2.Err)
	}
	if got, want := r1.Text+r2.Text, "One two three four."; got != want {
		t.Fatalf("resumed text = %q, want %q", got, want)
	}
	for _, d := range r2.Deltas {
		if d.SequenceNumber <= lastSeq {
			t.Errorf("resumed delta with sequence %d <= %d", d.SequenceNumber, lastSeq)
		}
	}
	if r2.Finish == nil || r2.Finish.Usage.OutputTokens != 4 {
		t.Errorf("finish = %+v", r2.Finish)
	}
	reqs := srv.Requests()
	if got := reqs[len(reqs)-1].Query.Get("starting_after"); got != strconv.FormatInt(lastSeq, 10) {
		t.Errorf("starting_after = %q, want %d", got, lastSeq)
	}

	// The caller recorded the sequence number after "One " but stored
	// "One two " (a stash lags the stored chunks): the overlap "two " is
	// skipped, so no text comes twice.
	seqAtOne := r1.Deltas[len(r1.Deltas)-2].SequenceNumber
	req.Continue = &llm.Continuation{ResponseID: "resp_bg", SequenceNumber: seqAtOne, PartialText: "One two ", TextAtSequence: len("One ")}
	r4 := llmtest.Collect(t, t.Context(), p, req)
	if r4.Err != nil || "One two "+r4.Text != "One two three four." {
		t.Fatalf("resume with a stored overlap: text %q err %v", r4.Text, r4.Err)
	}

	// Only response.created (sequence 0) was received: starting_after=0 is
	// still sent and the whole text follows.
	req.Continue = &llm.Continuation{ResponseID: "resp_bg", SequenceNumber: 0}
	r3 := llmtest.Collect(t, t.Context(), p, req)
	if r3.Err != nil || r3.Text != "One two three four." {
		t.Fatalf("resume from 0: text %q err %v", r3.Text, r3.Err)
	}
}

// A response not created in background mode is finished from the stored
// response: its text beyond what was received.
func TestOpenAIResponsesStoredRetrieval(t *testing.T) {
	full := llmtest.NewResponses("resp_st", "m", false).Text("Alpha ", "beta ", "gamma.").Completed(5, 3)
	events := full.Events()
	first := append(append([]llmtest.Event(nil), events[:5]...), llmtest.Cut())
	srv := llmtest.NewServer(t, func(r llmtest.Request) llmtest.Reply {
		switch {
		case r.Method == http.MethodPost:
			return llmtest.Stream(first)
		case r.Method == http.MethodGet && r.Path == "/v1/responses/resp_st" && r.Query.Get("stream") == "":
			return llmtest.JSONReply(200, full.Object("completed"))
		}
		return llmtest.OpenAIError(400, "invalid_request_error", "", "unexpected "+r.Method+" "+r.Path+"?"+r.Query.Encode())
	})
	p := newResponses(t, srv, false)
	r1 := llmtest.Collect(t, t.Context(), p, llmtest.UserRequest("letters"))
	llmtest.WantError(t, r1.Err, true)
	if r1.Text != "Alpha " {
		t.Fatalf("first attempt text = %q", r1.Text)
	}
	req := llmtest.UserRequest("letters")
	req.Continue = &llm.Continuation{ResponseID: "resp_st", SequenceNumber: r1.Deltas[len(r1.Deltas)-1].SequenceNumber, PartialText: r1.Text}
	r2 := llmtest.Collect(t, t.Context(), p, req)
	if r2.Err != nil {
		t.Fatal(r2.Err)
	}
	if got, want := r1.Text+r2.Text, "Alpha beta gamma."; got != want {
		t.Fatalf("recovered text = %q, want %q", got, want)
	}
	if r2.Finish == nil || *r2.Finish.Usage != (llm.Usage{InputTokens: 5, OutputTokens: 3}) || r2.Finish.FinishReason != llm.FinishStop {
		t.Errorf("finish = %+v", r2.Finish)
	}

	// A partial text that the stored response does not start with is refused.
	req.Continue.PartialText = "Omega"
	r3 := llmtest.Collect(t, t.Context(), p, req)
	if e := llmtest.WantError(t, r3.Err, false); !errors.Is(e, llm.ErrContinuation) {
		t.Errorf("err = %v, want ErrContinuation", r3.Err)
	}
}

// Without a response id, a continuation is a new response asked to go on
// after the partial text.
func TestOpenAIResponsesContinueWithoutID(t *testing.T) {
	srv := llmtest.NewServer(t, func(r llmtest.Request) llmtest.Reply {
		return llmtest.Stream(llmtest.NewResponses("r2", "m", false).Text(" rest.").Completed(1, 1).Events())
	})
	req := llmtest.UserRequest("go")
	req.Continue = &llm.Continuation{PartialText: "The start"}
	r := llmtest.Collect(t, t.Context(), newResponses(t, srv, false), req)
	if r.Err != nil || r.Text != " rest." {
		t.Fatalf("text %q err %v", r.Text, r.Err)
	}
	var body struct {
		Input []struct{ Role, Content string } `json:"input"`
	}
	if err := srv.Requests()[0].Decode(&body); err != nil {
		t.Fatal(err)
	}
	if len(body.Input) != 3 || body.Input[1].Role != "assistant" || body.Input[1].Content != "The start" ||
		body.Input[2].Role != "user" || !strings.HasPrefix(body.Input[2].Content, "Continue") {
		t.Errorf("input = %+v", body.Input)
	}
}
