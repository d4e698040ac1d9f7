package auth

import (
	"errors"
	"fmt"
	"strings"
)

// InboxPrefix is where every answer of agentd to a client goes: a
// request's reply subject must be under it (CheckReply), and a tenant's
// client may subscribe there (ClientPermissions). It is nats.go's default
// inbox prefix; a client with a custom one (nats.CustomInboxPrefix) gets
// no answer from agentd.
const InboxPrefix = "_INBOX."

// ErrReplySubject is returned by CheckReply for a reply subject agentd
// does not answer on.
var ErrReplySubject = errors.New("auth: reply subject not an inbox")

// maxReplyQuote bounds what an error quotes of a reply subject.
const maxReplyQuote = 64

// CheckReply admits a request's reply subject: one under InboxPrefix, with
// at least one token after it, no empty token, no wildcard token and no
// white space. Anything else (no reply, a stream's subject, a KV key) is
// refused with an error wrapping ErrReplySubject: NATS does not check a
// publisher's reply subject against its permissions, and agentd's answer
// on a subject a client chose would be a write in the client's name.
func CheckReply(reply string) error {
	rest, ok := strings.CutPrefix(reply, InboxPrefix)
	if ok && rest != "" {
		ok = !strings.ContainsAny(rest, " \t\r\n\f\v\x00")
		for tok := range strings.SplitSeq(rest, ".") {
			ok = ok && tok != "" && tok != "*" && tok != ">"
		}
		if ok {
			return nil
		}
	}
	q := reply
	if len(q) > maxReplyQuote {
		q = q[:maxReplyQuote] + "..."
	}
	if reply == "" {
		return fmt.Errorf("%w: the request has no reply subject; agentd answers only on one under %s", ErrReplySubject, InboxPrefix)
	}
	return fmt.Errorf("%w: reply subject %q is not under %s; agentd answers only on an inbox", ErrReplySubject, q, InboxPrefix)
}
