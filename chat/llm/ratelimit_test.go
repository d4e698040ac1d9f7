package llm_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat/llm"
)

// Past its limit the local model answers as a provider over its rate
// limit does: a retryable 429 with a Retry-After in whole seconds.
func TestLocalLimit(t *testing.T) {
	l := llm.NewLocal(llm.LocalConfig{Rate: -1, Limit: llm.LocalLimit{Calls: 1, Per: 2 * time.Second}})
	req := llm.Request{Messages: []llm.Message{llm.Text(llm.RoleUser, "hi")}}
	for _, err := range l.Stream(t.Context(), req) {
		if err != nil {
			t.Fatalf("first call: %v", err)
		}
	}
	var got error
	for _, err := range l.Stream(t.Context(), req) {
		got = err
	}
	var e *llm.Error
	if !errors.As(got, &e) || e.Status != 429 || !e.Retryable || !llm.RateLimited(got) || !errors.Is(got, llm.ErrRateLimited) {
		t.Fatalf("second call: %v, want a retryable 429", got)
	}
	if ra := llm.RetryAfterOf(got); ra <= 0 || ra > 2*time.Second || ra%time.Second != 0 {
		t.Fatalf("Retry-After %v, want whole seconds up to 2s", ra)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		h    http.Header
		want time.Duration
	}{
		{"seconds", http.Header{"Retry-After": {"2"}}, 2 * time.Second},
		{"ms wins", http.Header{"Retry-After": {"2"}, "Retry-After-Ms": {"1500"}}, 1500 * time.Millisecond},
		{"date", http.Header{"Retry-After": {now.Add(3 * time.Second).Format(http.TimeFormat)}}, 3 * time.Second},
		{"past date", http.Header{"Retry-After": {now.Add(-time.Second).Format(http.TimeFormat)}}, 0},
		{"garbage", http.Header{"Retry-After": {"soon"}}, 0},
		{"negative", http.Header{"Retry-After": {"-4"}}, 0},
		{"none", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := llm.ParseRetryAfter(tc.h, now); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRateLimited(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&llm.Error{Retryable: true, Status: 429}, true},
		{&llm.Error{Retryable: true, Status: 529}, true},
		{&llm.Error{Retryable: true, Code: "overloaded_error"}, true},
		{&llm.Error{Retryable: true, Status: 500}, false},
		{&llm.Error{Status: 429}, false}, // terminal: a quota exhausted for good
		{errors.New("x"), false},
		{nil, false},
	} {
		if got := llm.RateLimited(tc.err); got != tc.want {
			t.Errorf("RateLimited(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
