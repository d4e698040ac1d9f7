package host

import (
	"errors"
	"net/http"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

// Errors of commands. Agents wrap them (fmt.Errorf("%w: ...", ErrBadRequest))
// so the NATS service and the HTTP gateway answer with the right code.
var (
	// ErrBadRequest: malformed or invalid input (400).
	ErrBadRequest = errors.New("agentd: bad request")
	// ErrNotFound: unknown agent type, command or stream (404).
	ErrNotFound = errors.New("agentd: not found")
	// ErrConflict: the request conflicts with the agent's state (409).
	ErrConflict = errors.New("agentd: conflict")
	// ErrForbidden: the request's credential may not do this: its role
	// does not allow the command (403).
	ErrForbidden = errors.New("agentd: forbidden")
	// ErrTooLarge: the payload is larger than allowed (413).
	ErrTooLarge = errors.New("agentd: payload too large")
	// ErrUnavailable: the agent has no owner that can take the command
	// now (a partition handoff or failover in progress, or the node is
	// stopping); retry (503).
	ErrUnavailable = errors.New("agentd: unavailable, retry")
	// ErrTimeout: the node that owns the agent did not answer a forwarded
	// command in time; it may have run it (504). Retry only what is safe to
	// repeat (a chat with its message id is).
	ErrTimeout = errors.New("agentd: the owner did not answer in time")
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
		eventlog.Unavailable(err):
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}
