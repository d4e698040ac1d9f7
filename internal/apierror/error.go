package apierror

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/forever-agents/forever/internal/jsonstr"
)

// The codes of the API; see the package doc for what each means.
const (
	BadRequest   = http.StatusBadRequest            // 400
	Unauthorized = http.StatusUnauthorized          // 401
	OverBudget   = http.StatusPaymentRequired       // 402
	Forbidden    = http.StatusForbidden             // 403
	NotFound     = http.StatusNotFound              // 404
	Conflict     = http.StatusConflict              // 409
	Gone         = http.StatusGone                  // 410
	TooLarge     = http.StatusRequestEntityTooLarge // 413
	OverQuota    = http.StatusTooManyRequests       // 429
	Internal     = http.StatusInternalServerError   // 500
	Unavailable  = http.StatusServiceUnavailable    // 503
	Timeout      = http.StatusGatewayTimeout        // 504
)

// Codes returns the documented codes in increasing order. The caller owns
// the slice.
func Codes() []int {
	return []int{BadRequest, Unauthorized, OverBudget, Forbidden, NotFound, Conflict, Gone, TooLarge, OverQuota, Internal, Unavailable, Timeout}
}

// Error is an error as a client reads it: a code from Codes and a sentence.
// Build it where the cause is known (New), or translate at the edge
// (From). It is an error, so it travels through ordinary returns; Unwrap
// gives the cause, which stays inside the process.
type Error struct {
	// Code is one of Codes.
	Code int
	// Message is a sentence a person can act on: what is wrong and, where
	// it helps, what to do. No Go type or package names.
	Message string
	// RetryAfter, when positive, is sent as Retry-After (rounded up to
	// whole seconds): when a retry may pass (429, 503).
	RetryAfter time.Duration
	// Err is the cause, for logs and errors.Is; it is never sent.
	Err error

	pkg   string // the package that declared it (Declare), for Error()
	class bool   // a class of errors (ErrBadRequest, ...): Is matches by code
}

// New returns an *Error with code and the message fmt.Sprintf(format,
// args...). Use %q for what the client sent (a field name, a value), so the
// message quotes it. %w is not for New: a cause goes in WithCause, not in
// the message.
func New(code int, format string, args ...any) *Error {
	msg := format
	if len(args) > 0 {
		msg = fmt.Sprintf(format, args...)
	}
	return &Error{Code: code, Message: msg}
}

// WithCause returns a copy of e with cause as its Err.
func (e *Error) WithCause(cause error) *Error {
	c := *e
	c.Err = cause
	return &c
}

// WithRetryAfter returns a copy of e with RetryAfter d.
func (e *Error) WithRetryAfter(d time.Duration) *Error {
	c := *e
	c.RetryAfter = d
	return &c
}

// Error returns the message, after "pkg: " for an error a package
// declared (Declare): the Go text; clients read Message.
func (e *Error) Error() string {
	if e.pkg != "" {
		return e.pkg + ": " + e.Message
	}
	return e.Message
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// StatusCode returns the code, so code that classifies errors by a
// StatusCode() int method (replay.StatusCode) reads it.
func (e *Error) StatusCode() int { return e.Code }

// Is reports whether target is an *Error with the same code and message,
// so a sentinel *Error matches its copies (WithCause, WithRetryAfter), or
// the class (ErrBadRequest, ...) of e's code when no package declared e
// (New, Wrapf of a class): a package's sentinel matches only itself and
// what wraps it, so chat's 503 of a full node is not ErrUnavailable, the
// retry of a command nobody ran.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || t.Code != e.Code {
		return false
	}
	if t.class {
		return e.pkg == ""
	}
	return t.Message == e.Message && t.pkg == e.pkg
}

// MarshalJSON encodes e as {"code":N,"error":"..."}.
func (e *Error) MarshalJSON() ([]byte, error) { return e.AppendJSON(nil), nil }

// AppendJSON appends e's JSON form, {"code":N,"error":"..."}, to b.
func (e *Error) AppendJSON(b []byte) []byte {
	b = append(b, `{"code":`...)
	b = strconv.AppendInt(b, int64(e.Code), 10)
	b = append(b, `,"error":`...)
	b = jsonstr.Append(b, e.Message)
	return append(b, '}')
}

// retryAfterSeconds is the Retry-After value of e, "" for none: e's
// RetryAfter rounded up, or 1 for a 429 or 503 without one.
func (e *Error) retryAfterSeconds() string {
	switch {
	case e.RetryAfter > 0:
		return strconv.FormatInt(max(1, int64(math.Ceil(e.RetryAfter.Seconds()))), 10)
	case e.Code == OverQuota || e.Code == Unavailable:
		return "1"
	}
	return ""
}

// WriteHTTP writes e as an HTTP response: status e.Code, a JSON body
// {"code":N,"error":"..."} and, for 429 and 503, Retry-After (e.RetryAfter
// rounded up to seconds, else 1). Call it before anything else is written.
func (e *Error) WriteHTTP(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if ra := e.retryAfterSeconds(); ra != "" {
		h.Set("Retry-After", ra)
	}
	w.WriteHeader(e.Code)
	w.Write(append(e.AppendJSON(make([]byte, 0, 64+len(e.Message))), '\n'))
}

// Micro returns e as the arguments of a NATS micro error reply, for
// req.Error(e.Micro()): the code in decimal (Nats-Service-Error-Code), the
// message (Nats-Service-Error) and the same JSON body as over HTTP.
func (e *Error) Micro() (code, description string, data []byte) {
	return strconv.Itoa(e.Code), e.Message, e.AppendJSON(nil)
}

// Parse reads an error body, {"code":N,"error":"..."}, as a client
// receives it over HTTP or NATS. ok is false for anything else (a reply
// that is not an error).
func Parse(data []byte) (e *Error, ok bool) {
	var v struct {
		Code  *int    `json:"code"`
		Error *string `json:"error"`
	}
	if json.Unmarshal(data, &v) != nil || v.Code == nil || v.Error == nil {
		return nil, false
	}
	return &Error{Code: *v.Code, Message: *v.Error}, true
}

// Text returns the fixed sentence of a code, used when an error carries a
// code but no sentence meant for clients.
func Text(code int) string {
	switch code {
	case BadRequest:
		return "the request is not valid"
	case Unauthorized:
		return "authentication required: send a valid token or credentials"
	case OverBudget:
		return "over budget: the agent's budget for this period is spent; retry after the time in Retry-After"
	case Forbidden:
		return "this credential may not do that"
	case NotFound:
		return "not found"
	case Conflict:
		return "the request conflicts with the current state: read it again and decide"
	case Gone:
		return "what the request asks for was removed for good"
	case TooLarge:
		return "the request is too large"
	case OverQuota:
		return "over quota: retry after the time in Retry-After"
	case Unavailable:
		return "temporarily unavailable: nothing ran; retry after the time in Retry-After"
	case Timeout:
		return "the request timed out; it may or may not have taken effect"
	}
	return "internal error: the server log has the details"
}

// Known returns code when it is one of Codes, else 400 for another 4xx and
// 500 for anything else.
func Known(code int) int {
	switch code {
	case BadRequest, Unauthorized, OverBudget, Forbidden, NotFound, Conflict, Gone, TooLarge, OverQuota, Internal, Unavailable, Timeout:
		return code
	}
	if code >= 400 && code < 500 {
		return BadRequest
	}
	return Internal
}

// From translates err for a client:
//
//   - the answer of the first error in err's chain that carries one
//     (Declared: an *Error, as it is, or an Answerer);
//   - context.DeadlineExceeded: 504;
//   - an error with a StatusCode() int method: that code (Known), with the
//     code's fixed sentence (Text): its own message was not written for
//     clients and may name packages;
//   - anything else: 500 with Text(500).
//
// A RetryAfter() time.Duration method anywhere in the chain sets
// RetryAfter. The result wraps err. From(nil) is nil.
func From(err error) *Error {
	if err == nil {
		return nil
	}
	if e := Declared(err); e != nil {
		return e
	}
	code := Internal
	var sc interface{ StatusCode() int }
	switch {
	case errors.As(err, &sc):
		code = Known(sc.StatusCode())
	case errors.Is(err, context.DeadlineExceeded):
		code = Timeout
	}
	e := &Error{Code: code, Message: Text(code), Err: err}
	var ra interface{ RetryAfter() time.Duration }
	if errors.As(err, &ra) {
		e.RetryAfter = ra.RetryAfter()
	}
	return e
}
