package llm_test

import (
	"context"
	"strings"
	"testing"

	"github.com/forever-agents/forever/chat/llm"
)

// result is everything one stream produced.
type result struct {
	deltas    []llm.Delta
	text      string
	reasoning string
	finish    *llm.Delta
	err       error
}

func (r result) kinds(k llm.DeltaKind) []llm.Delta {
	var out []llm.Delta
	for _, d := range r.deltas {
		if d.Kind == k {
			out = append(out, d)
		}
	}
	return out
}

func collect(t *testing.T, ctx context.Context, p llm.Provider, req llm.Request) result {
	t.Helper()
	var r result
	var text, reasoning strings.Builder
	for d, err := range p.Stream(ctx, req) {
		if err != nil {
			r.err = err
			break
		}
		r.deltas = append(r.deltas, d)
		switch d.Kind {
		case llm.TextDelta:
			text.WriteString(d.Text)
		case llm.ReasoningDelta:
			reasoning.WriteString(d.Text)
		case llm.Finish:
			f := d
			r.finish = &f
		}
	}
	r.text, r.reasoning = text.String(), reasoning.String()
	return r
}

func userReq(text string) llm.Request {
	return llm.Request{Messages: []llm.Message{llm.Text(llm.RoleUser, text)}}
}

// wantErr checks that err is an *llm.Error of the given class.
func wantErr(t *testing.T, err error, retryable bool) *llm.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want an *llm.Error (retryable=%v)", retryable)
	}
	e, ok := asError(err)
	if !ok {
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
