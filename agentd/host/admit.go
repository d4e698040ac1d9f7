package host

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/micro"

	"github.com/forever-agents/forever/auth"
)

// admit is the one admission of every endpoint of the NATS service a
// client reaches (a command, the listing, the cluster's view): a request
// whose reply subject is not an inbox (auth.CheckReply) is refused
// unanswered (replyAdmitted); otherwise it is answered through the
// replier (viaReplier: on a tenant's daemon, a user that may publish only
// under _INBOX.), and it takes one of the node's
// MaxCommandsInFlight slots, or is answered 503, and serve answers it in
// a goroutine of its own (the micro service calls an endpoint's handler
// one request at a time, and a command may wait: an activation, a
// catch-up, a forwarded command). Commands sent concurrently are not
// ordered, as with any NATS requests; a client that needs order waits for
// each reply.
func (h *Host) admit(serve func(micro.Request)) micro.HandlerFunc {
	return func(req micro.Request) {
		if !h.replyAdmitted(req) {
			return
		}
		req = viaReplier(req, h.deps)
		select {
		case h.inflight <- struct{}{}:
		default:
			RespondError(req, ErrUnavailable.Wrapf("%d commands in flight on node %s, retry later", cap(h.inflight), h.own.Node()))
			return
		}
		h.handling.Add(1)
		go func() {
			defer func() {
				<-h.inflight
				h.handling.Done()
			}()
			serve(req)
		}()
	}
}

// replyAdmitted reports whether req's reply subject is one agentd answers
// on (auth.CheckReply). When it is not, the request is not answered on
// it: NATS does not check a publisher's reply subject against its
// permissions, and agentd's user may publish anywhere in the account, so
// an answer there (an event stream, a KV key) would be a write in the
// client's name. The refusal takes one request from the tenant's rate
// quota, is logged (at most logRefusals a second) and goes to the audit
// log (Config.AuditCommand) as a refusal.
func (h *Host) replyAdmitted(req micro.Request) bool {
	err := auth.CheckReply(req.Reply())
	if err == nil {
		return true
	}
	_ = h.quotas.Allow() // counted; nothing is answered either way
	agent, verb := "", req.Subject()
	if a, v, serr := commandSubject(req.Subject()); serr == nil {
		agent, verb = a, v
	}
	err = fmt.Errorf("%w (request on %s)", err, req.Subject())
	if h.refusalLog.Allow() {
		h.logger.Warn("request refused: its reply subject is not an inbox", "subject", req.Subject(), "reply", req.Reply())
	}
	if h.deps != nil && h.deps.Config.AuditCommand != nil {
		h.deps.Config.AuditCommand(context.Background(), agent, verb, err)
	}
	return false
}
