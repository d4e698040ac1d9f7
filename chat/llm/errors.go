package llm

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strconv"
	"strings"
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

// retryableStatus classifies an HTTP status: 408, 409, 425, 429 and 5xx
// (including Anthropic's 529) may succeed later; other 4xx will not.
func retryableStatus(code int) bool {
	switch {
	case code == http.StatusRequestTimeout, code == http.StatusConflict,
		code == http.StatusTooEarly, code == http.StatusTooManyRequests:
		return true
	case code >= 500:
		return true
	case code >= 400:
		return false
	}
	return true
}

// missingKeyError is the construction error for a missing API key.
type missingKeyError struct{ provider, env string }

func (e *missingKeyError) Error() string {
	return "llm: " + e.provider + ": " + e.env + " is not set"
}

func (e *missingKeyError) Is(target error) bool { return target == ErrMissingAPIKey }

func configError(provider, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, provider, fmt.Sprintf(format, args...))
}

// ctxErr returns the cause of ctx when it is done, else nil. A stream that
// fails because its context ended yields this error, not an *Error.
func ctxErr(ctx context.Context) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// sink wraps the yield function of an iterator and remembers when the
// consumer stopped.
type sink struct {
	yield   func(Delta, error) bool
	stopped bool
}

// send yields d and reports whether the consumer wants more.
func (s *sink) send(d Delta) bool {
	if s.stopped {
		return false
	}
	if !s.yield(d, nil) {
		s.stopped = true
	}
	return !s.stopped
}

// stream adapts run to an iterator: run sends deltas through the sink and
// returns the error that ends the stream, yielded once unless the consumer
// already stopped, with secret (the provider's API key) redacted from it.
func stream(secret string, run func(s *sink) error) iter.Seq2[Delta, error] {
	return func(yield func(Delta, error) bool) {
		s := &sink{yield: yield}
		if err := run(s); err != nil && !s.stopped {
			yield(Delta{}, redact(secret, err))
		}
	}
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
