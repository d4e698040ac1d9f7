package host

import (
	"errors"
	"strings"
	"time"

	"github.com/forever-agents/forever/internal/apierror"
)

// ClientError is err as a client sees it, over NATS and HTTP alike: an
// *apierror.Error with err's code (StatusCode) and err's sentence without
// the prefixes that only name where in the process it came from ("agentd:
// bad request: ", "chat: ", "eventlog: "). An *apierror.Error in the chain
// is used as it is. A 500 never carries err's text, which was not written
// for clients: it gets apierror's fixed sentence, and the caller logs err.
// A RetryAfter() method in the chain sets the Retry-After to send.
func ClientError(err error) *apierror.Error {
	if err == nil {
		return nil
	}
	var ae *apierror.Error
	if errors.As(err, &ae) {
		return ae
	}
	code := apierror.Known(StatusCode(err))
	msg := apierror.Text(code)
	if code != apierror.Internal {
		if s := clientSentence(err.Error()); s != "" {
			msg = s
		}
	}
	e := apierror.New(code, "%s", msg).WithCause(err)
	var ra interface{ RetryAfter() time.Duration }
	if errors.As(err, &ra) {
		e = e.WithRetryAfter(ra.RetryAfter())
	}
	return e
}

// internalPrefixes are the texts packages put before an error's sentence:
// their own names and their sentinels', in the order they nest.
var internalPrefixes = []string{
	"agentd: ", "host: ", "chathost: ", "tenancy: ", "quota: ", "demo: ",
	"chat: ", "fiber: ", "eventlog: ", "keepalive: ", "replay: ", "ownership: ", "auth: ",
	"bad request: ", "not found: ", "conflict: ", "payload too large: ",
	"unavailable, retry: ", "the owner did not answer in time: ",
}

// clientSentence is msg's first line without its internal prefixes.
func clientSentence(msg string) string {
	msg, _, _ = strings.Cut(msg, "\n")
	for {
		trimmed := msg
		for _, p := range internalPrefixes {
			trimmed = strings.TrimPrefix(trimmed, p)
		}
		if trimmed == msg {
			return strings.TrimSpace(msg)
		}
		msg = trimmed
	}
}
