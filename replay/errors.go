package replay

import (
	"errors"
	"net/http"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
)

var (
	// ErrUnknownStream is returned by Client.Follow for a stream with no
	// chunk stored, and by Client.Latest for an agent without streams. The
	// gateway answers it with 404. (A stream whose chunks retention removed
	// is chunk.ErrExpired instead: 410 Gone, {"error":"chunks expired"}.)
	ErrUnknownStream = errors.New("replay: unknown stream")
	// ErrBadRequest marks a request the gateway cannot serve as sent:
	// malformed JSON, no messages, an id that is not a valid agent id. 400.
	ErrBadRequest = errors.New("replay: bad request")
	// ErrInvalidConfig is returned by NewGateway and GatewayConfig.Validate.
	ErrInvalidConfig = errors.New("replay: invalid config")
)

// StatusCode returns the HTTP status for err: the code of the first error in
// its chain with a StatusCode() int method (chat's errors carry theirs),
// else the code of a known sentinel (this package's, chunk's, eventlog's),
// else 500.
func StatusCode(err error) int {
	var sc interface{ StatusCode() int }
	if errors.As(err, &sc) {
		if c := sc.StatusCode(); c >= 400 && c <= 599 {
			return c
		}
	}
	switch {
	case errors.Is(err, ErrBadRequest), errors.Is(err, ErrBadCursor),
		errors.Is(err, eventlog.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, eventlog.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrUnknownStream), errors.Is(err, chunk.ErrUnknownStream):
		return http.StatusNotFound
	case errors.Is(err, eventlog.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, chunk.ErrExpired):
		return http.StatusGone
	}
	return http.StatusInternalServerError
}
