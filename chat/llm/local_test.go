package llm_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/chat/llm/llmtest"
)

func fastLocal() *llm.Local { return llm.NewLocal(llm.LocalConfig{Rate: -1}) }

func TestLocalDeterministic(t *testing.T) {
	tests := []struct {
		name             string
		prompt           string
		minWords, maxWds int
	}{
		{"story", "Tell me a story about a dragon who learned to bake.", 200, 400},
		{"reply", "What is the capital of France?", 15, 45},
		{"empty", "", 15, 45},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fastLocal()
			a := llmtest.Collect(t, t.Context(), p, llmtest.UserRequest(tt.prompt))
			b := llmtest.Collect(t, t.Context(), p, llmtest.UserRequest(tt.prompt))
			if a.Err != nil || b.Err != nil {
				t.Fatalf("errs %v, %v", a.Err, b.Err)
			}
			if a.Text != b.Text {
				t.Fatalf("not deterministic:\n%q\n%q", a.Text, b.Text)
			}
			if got, want := a.Text, p.Answer(llmtest.UserRequest(tt.prompt)); got != want {
				t.Fatalf("streamed text != Answer:\n%q\n%q", got, want)
			}
			n := len(strings.Fields(a.Text))
			if n < tt.minWords || n > tt.maxWds {
				t.Errorf("%d words, want %d..%d: %q", n, tt.minWords, tt.maxWds, a.Text)
			}
			if a.Finish == nil || a.Finish.Usage == nil {
				t.Fatalf("no Finish with usage: %+v", a.Finish)
			}
			if got, want := a.Finish.Usage.OutputTokens, int64(len(a.Kinds(llm.TextDelta))); got != want {
				t.Errorf("OutputTokens = %d, want %d", got, want)
			}
			if got, want := a.Finish.FinishReason, llm.FinishStop; got != want {
				t.Errorf("FinishReason = %q, want %q", got, want)
			}
			if got := a.Deltas[0].Kind; got != llm.ResponseMeta {
				t.Errorf("first delta %v, want ResponseMeta", got)
			}
		})
	}
	p := fastLocal()
	if p.Answer(llmtest.UserRequest("a story about cats")) == p.Answer(llmtest.UserRequest("a story about dogs")) {
		t.Error("different prompts gave the same story")
	}
	if !strings.Contains(p.Answer(llmtest.UserRequest("What is the capital of France?")), "capital of France") {
		t.Error("reply does not address the message")
	}
}

func TestLocalContinuation(t *testing.T) {
	p := fastLocal()
	req := llmtest.UserRequest("Please write a story about the sea.")
	full := p.Answer(req)
	for _, cut := range []int{1, 7, len(full) / 3, len(full) / 2, len(full) - 1, len(full)} {
		partial := full[:cut]
		creq := req
		// The chat layer may or may not include the hidden continue prompt;
		// the local model answers the last real user message either way.
		creq.Messages = append(append([]llm.Message(nil), req.Messages...),
			llm.Text(llm.RoleAssistant, partial), llm.Text(llm.RoleUser, llm.ContinuePrompt))
		creq.Continue = &llm.Continuation{PartialText: partial}
		r := llmtest.Collect(t, t.Context(), p, creq)
		if r.Err != nil {
			t.Fatalf("cut %d: %v", cut, r.Err)
		}
		if got := partial + r.Text; got != full {
			t.Fatalf("cut %d: partial+continuation != full\n got %q\nwant %q", cut, got, full)
		}
	}
	req.Continue = &llm.Continuation{PartialText: "Something else entirely"}
	r := llmtest.Collect(t, t.Context(), p, req)
	e := llmtest.WantError(t, r.Err, false)
	if !errors.Is(e, llm.ErrContinuation) {
		t.Errorf("err = %v, want ErrContinuation", r.Err)
	}
}

// A continuation that resumes the answer's response (its ResponseID)
// reports the whole response's usage, as a resumed OpenAI Responses
// response does; one without the id counts what it yields. So a turn cut
// by a crash and continued records what the uncut turn records.
func TestLocalContinuationUsage(t *testing.T) {
	p := fastLocal()
	req := llmtest.UserRequest("Please write a story about the sea.")
	whole := llmtest.Collect(t, t.Context(), p, req)
	if whole.Err != nil || whole.Finish == nil || whole.Finish.Usage == nil {
		t.Fatalf("uncut answer: %v", whole.Err)
	}
	var id string
	for _, d := range whole.Kinds(llm.ResponseMeta) {
		id = d.ResponseID
	}
	full := whole.Text
	for _, tc := range []struct {
		name       string
		responseID string
		want       int64
	}{
		{"same response", id, whole.Finish.Usage.OutputTokens},
		{"no response id", "", int64(len(whole.Kinds(llm.TextDelta)) - 7)},
	} {
		creq := req
		cut := 0
		for i, d := range whole.Kinds(llm.TextDelta) {
			if i == 7 {
				break
			}
			cut += len(d.Text)
		}
		creq.Continue = &llm.Continuation{PartialText: full[:cut], ResponseID: tc.responseID}
		r := llmtest.Collect(t, t.Context(), p, creq)
		if r.Err != nil || r.Finish == nil || r.Finish.Usage == nil {
			t.Fatalf("%s: %v", tc.name, r.Err)
		}
		if got := r.Finish.Usage.OutputTokens; got != tc.want {
			t.Errorf("%s: output tokens %d, want %d", tc.name, got, tc.want)
		}
		if got := r.Finish.Usage.InputTokens; got != whole.Finish.Usage.InputTokens {
			t.Errorf("%s: input tokens %d, want %d", tc.name, got, whole.Finish.Usage.InputTokens)
		}
	}
}

func TestLocalCancellation(t *testing.T) {
	p := llm.NewLocal(llm.LocalConfig{Rate: 0.5}) // one token every 2 s
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var texts int
	var err error
	for d, e := range p.Stream(ctx, llmtest.UserRequest("tell me a story")) {
		if e != nil {
			err = e
			break
		}
		if d.Kind == llm.TextDelta {
			texts++
			cancel()
		}
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if texts != 1 {
		t.Errorf("%d text deltas after cancel, want 1", texts)
	}

	// A cancelled context fails before anything is yielded.
	r := llmtest.Collect(t, ctx, fastLocal(), llmtest.UserRequest("hi"))
	if !errors.Is(r.Err, context.Canceled) || len(r.Deltas) != 0 {
		t.Errorf("pre-cancelled: %d deltas, err %v", len(r.Deltas), r.Err)
	}
}

func TestLocalBreakStops(t *testing.T) {
	n := 0
	for range fastLocal().Stream(t.Context(), llmtest.UserRequest("a story")) {
		n++
		if n == 3 {
			break
		}
	}
	if n != 3 {
		t.Fatalf("n = %d", n)
	}
}
