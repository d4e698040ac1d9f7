package llmtest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/forever-agents/forever/chat/llm"
)

// Result is everything one provider stream produced.
type Result struct {
	Deltas    []llm.Delta
	Text      string
	Reasoning string
	Finish    *llm.Delta
	Err       error
}

// Kinds returns the deltas of kind k, in order.
func (r Result) Kinds(k llm.DeltaKind) []llm.Delta {
	var out []llm.Delta
	for _, d := range r.Deltas {
		if d.Kind == k {
			out = append(out, d)
		}
	}
	return out
}

// Collect runs p's stream for req to its end and returns what it produced;
// the first error ends it.
func Collect(t testing.TB, ctx context.Context, p llm.Provider, req llm.Request) Result {
	t.Helper()
	var r Result
	var text, reasoning strings.Builder
	for d, err := range p.Stream(ctx, req) {
		if err != nil {
			r.Err = err
			break
		}
		r.Deltas = append(r.Deltas, d)
		switch d.Kind {
		case llm.TextDelta:
			text.WriteString(d.Text)
		case llm.ReasoningDelta:
			reasoning.WriteString(d.Text)
		case llm.Finish:
			f := d
			r.Finish = &f
		}
	}
	r.Text, r.Reasoning = text.String(), reasoning.String()
	return r
}

// UserRequest is a request of one user message.
func UserRequest(text string) llm.Request {
	return llm.Request{Messages: []llm.Message{llm.Text(llm.RoleUser, text)}}
}

// WantError fails t unless err is an *llm.Error of the given class, and
// returns it.
func WantError(t testing.TB, err error, retryable bool) *llm.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want an *llm.Error (retryable=%v)", retryable)
	}
	var e *llm.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v (%T), want *llm.Error", err, err)
	}
	if got := e.Retryable; got != retryable {
		t.Fatalf("Retryable = %v, want %v (err %v)", got, retryable, err)
	}
	if got, want := llm.IsRetryable(err), retryable; got != want {
		t.Fatalf("IsRetryable = %v, want %v", got, want)
	}
	return e
}
