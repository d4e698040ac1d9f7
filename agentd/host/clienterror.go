package host

import (
	"errors"
	"time"

	"github.com/forever-agents/forever/internal/apierror"
)

// ClientError is err as a client sees it, over NATS and HTTP alike. An
// error that carries its answer (apierror.Declared: an *apierror.Error
// declared where it was born, with its code and sentence, or an
// apierror.Answerer) is sent as it says. Any other error gets its code
// (StatusCode) and that code's fixed sentence (apierror.Text): its text
// was written for the process, not for clients, and is never cut up into
// a sentence. The caller logs err when it matters (a 500).
// A RetryAfter() method in the chain sets the Retry-After to send.
func ClientError(err error) *apierror.Error {
	if err == nil {
		return nil
	}
	if e := apierror.Declared(err); e != nil {
		return e
	}
	code := apierror.Known(StatusCode(err))
	e := apierror.New(code, "%s", apierror.Text(code)).WithCause(err)
	var ra interface{ RetryAfter() time.Duration }
	if errors.As(err, &ra) {
		e = e.WithRetryAfter(ra.RetryAfter())
	}
	return e
}
