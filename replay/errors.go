package replay

import (
	"errors"
	"net/url"
	"time"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/apierror"
)

var (
	// ErrUnknownStream is returned by Client.Follow for a stream with no
	// chunk stored, and by Client.Latest for an agent without streams. The
	// gateway answers it with 404. (A stream whose chunks retention removed
	// is chunk.ErrExpired instead: 410 Gone.)
	ErrUnknownStream = errors.New("replay: unknown stream")
	// ErrBadRequest marks a request the gateway cannot serve as sent:
	// malformed JSON, no messages, an id that is not a valid agent id. 400.
	// It is apierror.ErrBadRequest, the one bad-request sentinel (as
	// host.ErrBadRequest is): errors.Is(err, ErrBadRequest) holds for every
	// 400 *apierror.Error.
	ErrBadRequest = apierror.ErrBadRequest
	// ErrInvalidConfig is returned by NewGateway and GatewayConfig.Validate.
	ErrInvalidConfig = errors.New("replay: invalid config")
)

// StatusCode returns the HTTP status the gateway answers err with: the
// code of an *apierror.Error in its chain, else that of a known sentinel
// (this package's, chunk's, eventlog's), else that of the first error in
// the chain with a StatusCode() int method (chat's errors carry theirs),
// else 500. It is the Code of the error the gateway sends (see apiError).
func StatusCode(err error) int { return apiError(err).Code }

// apiError translates err for a client, once, at the edge: an error that
// carries its answer (apierror.Declared) is sent as it says; replay's, chunk's and
// eventlog's sentinels get a fixed sentence; anything else goes through
// apierror.From, which keeps the code of a StatusCode() int method but
// never the message of an error not written for clients.
func apiError(err error) *apierror.Error {
	if e := apierror.Declared(err); e != nil {
		return e
	}
	switch {
	case errors.Is(err, chunk.ErrExpired):
		return apierror.New(apierror.Gone, "%s", expiredText).WithCause(err)
	case errors.Is(err, ErrUnknownStream), errors.Is(err, chunk.ErrUnknownStream):
		return apierror.New(apierror.NotFound, "this chat has no such stream").WithCause(err)
	case errors.Is(err, ErrBadCursor):
		return apierror.New(apierror.BadRequest, "%s", cursorRule).WithCause(err)
	case errors.Is(err, eventlog.ErrTooLarge):
		return apierror.New(apierror.TooLarge, "%s", apierror.Text(apierror.TooLarge)).WithCause(err)
	case errors.Is(err, eventlog.ErrConflict):
		return apierror.New(apierror.Conflict, "%s", apierror.Text(apierror.Conflict)).WithCause(err)
	case errors.Is(err, eventlog.ErrConsumerLimit):
		return apierror.New(apierror.OverQuota, "%s", consumerLimitText).WithCause(err).WithRetryAfter(consumerLimitRetry)
	case errors.Is(err, eventlog.ErrInvalid):
		return apierror.New(apierror.BadRequest, "the request names an agent or stream id that is not valid").WithCause(err)
	}
	return apierror.From(err)
}

// consumerLimitText is the error of a chat that cannot follow its stream
// because its tenant's (or the stream's) consumers are all in use;
// consumerLimitRetry is when to retry.
const (
	consumerLimitText  = "this chat cannot follow its stream now: every consumer the tenant's quota allows is in use (readers of the chunk stream); retry when some end, or raise the tenant's consumer limit"
	consumerLimitRetry = 5 * time.Second
)

// expiredText is the error of a resume whose chunks retention removed.
const expiredText = "chunks expired: retention removed this turn's chunks; read the conversation from /v1/chat/{id}/messages instead"

// cursorRule says what a cursor is, for the errors of a bad one.
const cursorRule = apierror.CursorRule

// echo returns s for quoting in an error, cut to 64 bytes.
func echo(s string) string { return apierror.Echo(s) }

// badRequest returns a 400 *apierror.Error wrapping ErrBadRequest.
func badRequest(format string, args ...any) *apierror.Error {
	return apierror.New(apierror.BadRequest, format, args...).WithCause(ErrBadRequest)
}

// badAgentID is the error of a chat id that cannot be an agent id; where
// says where the id was (`chat id`, `"id"`).
func badAgentID(where, id string) *apierror.Error {
	return apierror.BadAgentID(where, id).WithCause(ErrBadRequest)
}

// expiredFor returns the 410 of a chat's expired turn, naming its
// messages.
func expiredFor(agent string, cause error) *apierror.Error {
	return apierror.New(apierror.Gone, "chunks expired: retention removed this turn's chunks; read the conversation from /v1/chat/%s/messages instead", url.PathEscape(agent)).WithCause(cause)
}
