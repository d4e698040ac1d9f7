package host

import (
	"errors"
	"net/http"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/internal/apierror"
)

// Errors of commands: the classes of apierror, one per code. An agent
// says what is wrong with Wrapf, which is the sentence the client reads:
//
//	return nil, host.ErrBadRequest.Wrapf("steps must be 1..100000, got %d", n)
//
// so the NATS service and the HTTP gateway answer with the code and that
// sentence. errors.Is(err, ErrBadRequest) holds for every 400 *Error. An
// error that only wraps one with ErrBadRequest.Wrapf("...") gets
// the right code but the class's fixed sentence (apierror.Text): the edge
// never cuts text out of an error message.
var (
	// ErrBadRequest: malformed or invalid input (400). It is the one
	// bad-request sentinel (replay.ErrBadRequest is the same value).
	ErrBadRequest = apierror.ErrBadRequest
	// ErrNotFound: unknown agent type, command or stream (404).
	ErrNotFound = apierror.ErrNotFound
	// ErrConflict: the request conflicts with the agent's state (409).
	ErrConflict = apierror.ErrConflict
	// ErrForbidden: the request's credential may not do this: its role
	// does not allow the command (403).
	ErrForbidden = apierror.ErrForbidden
	// ErrTooLarge: the payload is larger than allowed (413).
	ErrTooLarge = apierror.ErrTooLarge
	// ErrUnavailable: the agent has no owner that can take the command
	// now (a partition handoff or failover in progress, or the node is
	// stopping); retry (503).
	ErrUnavailable = apierror.ErrUnavailable
	// ErrTimeout: the node that owns the agent did not answer a forwarded
	// command in time; it may have run it (504). Retry only what is safe to
	// repeat (a chat with its message id is).
	ErrTimeout = apierror.ErrTimeout
)

// StatusCoder is implemented by errors that carry their own status code, so
// packages below agentd can classify errors without importing it.
type StatusCoder interface{ StatusCode() int }

// StatusCode maps an error to an HTTP-style status code: 400, 403, 404,
// 409, 413, 503, 504 or 500.
func StatusCode(err error) int {
	var sc StatusCoder
	switch {
	case err == nil:
		return http.StatusOK
	case errors.As(err, &sc):
		return sc.StatusCode()
	case errors.Is(err, ErrBadRequest), errors.Is(err, eventlog.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, ErrConflict), errors.Is(err, eventlog.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, ErrTooLarge), errors.Is(err, eventlog.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrTimeout), errors.Is(err, eventlog.ErrUnconfirmed):
		// No answer in time: the command, or its write, may have run.
		return http.StatusGatewayTimeout
	case errors.Is(err, ErrUnavailable), errors.Is(err, eventlog.ErrNotOwner), errors.Is(err, eventlog.ErrFenced),
		errors.Is(err, fiber.ErrStopped), // the agent stopped here (moved, deactivated) as the command came
		errors.Is(err, eventlog.ErrStorageFull), errors.Is(err, eventlog.ErrViewsStalled),
		eventlog.Unavailable(err),
		// Nothing was written, for certain: an append whose deadline
		// passed before it was sent (while it waited for the agent's
		// fence), as a wait for an owner that ends is (503, not 500).
		eventlog.Unwritten(err):
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}
