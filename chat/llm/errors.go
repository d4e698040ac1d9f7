package llm

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// Error classes and causes. Every error a Stream yields for a provider
// failure is an [*Error]; errors.Is(err, ErrRetryable) or
// errors.Is(err, ErrTerminal) tells which class it is.
var (
	// ErrRetryable matches every *Error marked Retryable: 429, 5xx, an
	// overloaded or server error event, a cut connection. Retrying the same
	// request (or continuing it, see Continuation) may succeed.
	ErrRetryable = errors.New("llm: retryable provider error")
	// ErrTerminal matches every *Error not marked Retryable: bad credentials,
	// an invalid request, a refused continuation. Retrying cannot help.
	ErrTerminal = errors.New("llm: terminal provider error")

	// ErrMissingAPIKey is returned by the New* constructors of remote
	// providers when no API key is configured or in the environment.
	ErrMissingAPIKey = errors.New("llm: API key is not set")
	// ErrInvalidConfig is returned by Validate and the New* constructors.
	ErrInvalidConfig = errors.New("llm: invalid config")
	// ErrStreamCut is the cause (wrapped in a retryable *Error) when a stream
	// ends before its terminal event: a cut connection or a server that
	// closed the stream early.
	ErrStreamCut = errors.New("llm: stream ended before completion")
	// ErrNotReady is the cause (wrapped in a retryable *Error) when an OpenAI
	// response being recovered is still running and cannot be streamed
	// because it was not created in background mode.
	ErrNotReady = errors.New("llm: response still in progress")
	// ErrContinuation is the cause (wrapped in a terminal *Error) when a
	// Continuation does not match the answer being continued, for example a
	// PartialText that is not a prefix of the stored response text.
	ErrContinuation = errors.New("llm: continuation does not match the response")
)

// Error is a provider failure, classified when it is created: Retryable
// says whether the same request may succeed later. Recovery code checks
// Retryable (or errors.Is with ErrRetryable/ErrTerminal) and never parses
// the message.
type Error struct {
	// Provider is the Name of the provider that failed.
	Provider string
	// Retryable is true when retrying or continuing may succeed.
	Retryable bool
	// Status is the HTTP status code, 0 when there was none (a cut
	// connection, an error event inside a 200 stream).
	Status int
	// Code is the provider's error code or type when it sent one, such as
	// "overloaded_error" or "server_error".
	Code string
	// RetryAfter is the wait the provider asked for (its Retry-After
	// header), 0 when it asked for none.
	RetryAfter time.Duration
	// Err is the cause.
	Err error
}

// Error returns "llm: <provider>: <retryable|terminal>[ status N][ code]: <cause>".
func (e *Error) Error() string {
	class := "terminal"
	if e.Retryable {
		class = "retryable"
	}
	s := "llm: " + e.Provider + ": " + class
	if e.Status != 0 {
		s += " status " + strconv.Itoa(e.Status)
	}
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether e belongs to the class target (ErrRetryable or
// ErrTerminal).
func (e *Error) Is(target error) bool {
	switch target {
	case ErrRetryable:
		return e.Retryable
	case ErrTerminal:
		return !e.Retryable
	}
	return false
}

// IsRetryable reports whether err is an *Error marked Retryable.
func IsRetryable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Retryable
}

// redact returns err with every occurrence of secret in its text replaced by
// "[redacted]": a provider that echoes the key it was sent (some do in their
// authentication errors) must not put it into a chat's error chunk, which
// clients see, or into the logs. An *Error keeps its type and fields.
func redact(secret string, err error) error {
	if err == nil || len(secret) < 8 || !strings.Contains(err.Error(), secret) {
		return err
	}
	clean := func(s string) string { return strings.ReplaceAll(s, secret, "[redacted]") }
	if e, ok := err.(*Error); ok {
		cp := *e
		cp.Code = clean(e.Code)
		if e.Err != nil {
			cp.Err = errors.New(clean(e.Err.Error()))
		}
		return &cp
	}
	return errors.New(clean(err.Error()))
}
