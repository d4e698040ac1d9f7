// Package apierror is the one shape of every error that leaves a Forever
// process: HTTP response bodies, NATS micro error replies, WebSocket error
// frames and the CLI's output all carry
//
//	{"code": <HTTP-style int>, "error": "<a sentence a person can act on>"}
//
// The message names what to fix the way the client spelled it (a JSON path
// such as "messages[0].parts[1].text", a header, a query parameter, a
// flag) and never a Go type, Go package or internal wrapping: packages keep
// their own sentinel errors and "pkg: op: cause" chains inside the process
// (see STYLE.md section 6) and the edge translates once, with From or by
// returning an *Error built where the cause is known.
//
// # Codes
//
// The codes are HTTP status codes, the same on every transport (a NATS
// micro error carries it in Nats-Service-Error-Code). The list is stable:
// a new code is a new version of the API.
//
//	code  name             meaning, and what the client does
//	400   bad request      the body, a parameter, a header or a subject is not
//	                       valid; the message names it. Fix the request; do
//	                       not retry it as is.
//	401   unauthorized     no credential, or one that is unknown, expired or
//	                       revoked. Send a valid token or creds.
//	402   over budget      the agent's token or cost budget for the period
//	                       is spent (the budget verb). Retry after
//	                       Retry-After seconds (the period's reset), or
//	                       raise the budget.
//	403   forbidden        the credential may not do this, or the request's
//	                       Host or Origin is not allowed. Do not retry.
//	404   not found        unknown agent, verb, stream, endpoint or subject.
//	409   conflict         the state changed under the request: a turn is
//	                       already running, a message id repeats, a version
//	                       does not match. Read the state, then decide.
//	410   gone             what the request asks for was removed for good
//	                       (a stream's chunks, by retention). Read what
//	                       remains instead (the messages).
//	413   too large        the request is over the size limit the message
//	                       states. Send less.
//	429   over quota       a rate or quota of the caller is used up. Retry
//	                       after Retry-After seconds.
//	500   internal error   a bug or an unexpected failure; the server log has
//	                       the details. Retrying may not help.
//	503   unavailable      nothing ran (an owner moving, JetStream electing,
//	                       the node at a limit, shutting down). Retry after
//	                       Retry-After seconds (1 when not given).
//	504   timeout          the server gave up waiting; the request may or may
//	                       not have taken effect. Retry idempotent requests.
//
// From maps any other status to 400 (4xx) or 500 (5xx), so nothing outside
// this list reaches a client.
//
// # Usage
//
//	var req chatRequest
//	body, err := apierror.ReadBody(r.Body, limit) // 413 over the limit
//	if err == nil {
//		err = apierror.Decode(body, &req) // 400 `"text" must be a string, got a number`
//	}
//	if err != nil {
//		apierror.From(err).WriteHTTP(w)
//		return
//	}
//
//	// In a NATS micro handler:
//	e := apierror.From(err)
//	req.Error(e.Micro())
//
// Invariants:
//   - From never returns a message taken from an error that is not an
//     *Error: other errors get the fixed sentence of their code (Text), so
//     no Go type, package or wrapping reaches a client through it.
//   - Decode's errors are *Error with code 400 (or 500 for a bad target,
//     a bug), and their messages name no Go type or package, whatever the
//     input (FuzzDecode).
//   - An *Error encodes as exactly {"code":N,"error":"..."} over HTTP and
//     as the data of a NATS micro error, whose code and description headers
//     carry the same code and message.
package apierror
