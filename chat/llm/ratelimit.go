package llm

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RateLimited reports whether err is a provider saying it is over its
// rate limit or overloaded: an *Error marked Retryable with status 429,
// 503 or 529, or the code "rate_limit_error", "rate_limit_exceeded" or
// "overloaded_error". A limiter (package modellimit) slows every caller
// of the provider for RetryAfterOf(err) on such an answer, rather than
// letting each turn retry on its own.
func RateLimited(err error) bool {
	var e *Error
	if !errors.As(err, &e) || !e.Retryable {
		return false
	}
	if e.Code == "insufficient_quota" { // OpenAI's 429 for a spent balance: no wait helps
		return false
	}
	switch e.Status {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable, 529:
		return true
	}
	switch e.Code {
	case "rate_limit_error", "rate_limit_exceeded", "overloaded_error":
		return true
	}
	return false
}

// RetryAfterOf returns the wait the provider asked for with err (its
// Retry-After), 0 when it asked for none or err is not an *Error.
func RetryAfterOf(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}

// ParseRetryAfter reads the wait a provider's answer asks for from its
// headers: retry-after-ms (OpenAI's, milliseconds), else Retry-After in
// seconds or as an HTTP date (relative to now). 0 when neither is there
// or parses; never negative.
func ParseRetryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && ms < 1e9 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 || s > 1e6 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
