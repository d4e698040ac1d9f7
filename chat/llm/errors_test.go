package llm_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/forever-agents/forever/chat/llm"
)

func asError(err error) (*llm.Error, bool) {
	var e *llm.Error
	ok := errors.As(err, &e)
	return e, ok
}

func TestErrorClasses(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		retryable bool
	}{
		{"retryable", &llm.Error{Provider: "p", Retryable: true, Err: io.ErrUnexpectedEOF}, true},
		{"terminal", &llm.Error{Provider: "p", Status: 401, Err: errors.New("bad key")}, false},
		{"wrapped", fmt.Errorf("turn: %w", &llm.Error{Provider: "p", Retryable: true, Err: llm.ErrStreamCut}), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errors.Is(tt.err, llm.ErrRetryable); got != tt.retryable {
				t.Errorf("Is(ErrRetryable) = %v, want %v", got, tt.retryable)
			}
			if got := errors.Is(tt.err, llm.ErrTerminal); got == tt.retryable {
				t.Errorf("Is(ErrTerminal) = %v, want %v", got, !tt.retryable)
			}
			if got := llm.IsRetryable(tt.err); got != tt.retryable {
				t.Errorf("IsRetryable = %v, want %v", got, tt.retryable)
			}
		})
	}
	e := &llm.Error{Provider: "anthropic", Retryable: true, Status: 529, Code: "overloaded_error", Err: io.ErrUnexpectedEOF}
	if got, want := e.Error(), "llm: anthropic: retryable status 529 overloaded_error: unexpected EOF"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(e, io.ErrUnexpectedEOF) {
		t.Error("errors.Is(e, cause) = false")
	}
	if llm.IsRetryable(io.EOF) {
		t.Error("IsRetryable(plain error) = true")
	}
}
