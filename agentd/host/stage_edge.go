package host

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"

	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/internal/apierror"
)

// The edge is the first stage of the command path (pipeline.go): what a
// request of the NATS service goes through before it is a Command.
//
//   - admit, for every endpoint a client reaches (a command, the listing,
//     the cluster's view): reply subject, in-flight slot, rate quota, and
//     the request's context;
//   - serveCommand, for a command: subject, size, actor, span, request id;
//     then the command goes down the pipeline (Host.Command) and its reply
//     or error goes back on the request.

// endpoint answers one admitted request under ctx: the host's context,
// bounded by commandTimeout.
type endpoint func(ctx context.Context, req micro.Request)

// admit is the one admission of every endpoint of the NATS service a
// client reaches (a command, the listing, the cluster's view): a request
// whose reply subject is not an inbox (auth.CheckReply) is refused
// unanswered (replyAdmitted); otherwise it is answered through the
// replier (viaReplier: on a tenant's daemon, a user that may publish only
// under _INBOX.), and it takes one of the node's
// MaxCommandsInFlight slots, or is answered 503, and serve answers it in
// a goroutine of its own (the micro service calls an endpoint's handler
// one request at a time, and a command may wait: an activation, a
// catch-up, a forwarded command). There it takes one request from the
// tenant's rate quota (429 past it) and runs under the host's context
// bounded by commandTimeout (503 before the host runs). Commands sent
// concurrently are not ordered, as with any NATS requests; a client that
// needs order waits for each reply.
func (h *Host) admit(serve endpoint) micro.HandlerFunc {
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
			if err := h.quotas.Allow(); err != nil {
				RespondError(req, err)
				return
			}
			ctx, cancel, err := h.requestContext()
			if err != nil {
				RespondError(req, err)
				return
			}
			defer cancel()
			serve(ctx, req)
		}()
	}
}

// requestContext is the context an admitted request runs under: the
// host's, bounded by commandTimeout. ErrUnavailable before the host
// started.
func (h *Host) requestContext() (context.Context, context.CancelFunc, error) {
	h.mu.Lock()
	base := h.mu.ctx
	h.mu.Unlock()
	if base == nil {
		return nil, nil, ErrUnavailable.Wrapf("starting up, try again")
	}
	ctx, cancel := context.WithTimeout(base, commandTimeout)
	return ctx, cancel, nil
}

// hostStopped reports whether the host's context ended: the node is
// stopping, and its partitions go to other nodes.
func (h *Host) hostStopped() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.ctx != nil && h.mu.ctx.Err() != nil
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

// commandSubject returns the agent and verb of a command subject
// <prefix>.cmd.<agent>.<verb>. Errors wrap ErrBadRequest.
func commandSubject(subject string) (agent, verb string, err error) {
	tokens := strings.Split(subject, ".")
	if len(tokens) < 4 {
		return "", "", ErrBadRequest.Wrapf("subject %q is not <prefix>.cmd.<agent>.<verb>", subject)
	}
	return tokens[len(tokens)-2], tokens[len(tokens)-1], nil
}

// serveCommand answers one admitted command request: its subject names
// the agent and the verb, its payload is at most MaxCommandBytes (413),
// the admin's own requests carry their actor (Config.CommandActor), and
// it is a "command <verb>" span; its Idempotency-Key header is the
// command's request id (a new one without). The command goes down the
// pipeline (Host.Command), and its reply, or its error, back on req.
func (h *Host) serveCommand(ctx context.Context, req micro.Request) {
	agent, verb, err := commandSubject(req.Subject())
	if err != nil {
		RespondError(req, err)
		return
	}
	if len(req.Data()) > MaxCommandBytes {
		RespondError(req, apierror.OverLimit(int64(len(req.Data())), MaxCommandBytes))
		return
	}
	if h.deps != nil && h.deps.Config.CommandActor != nil {
		// The admin through agentd's own user (agentd delete --tenant):
		// audited as the admin, not as a tenant's NATS credential.
		if id, ok := h.deps.Config.CommandActor(nats.Header(req.Headers())); ok {
			ctx = auth.WithIdentity(ctx, id)
		}
	}
	ctx, span := h.startCommandSpan(ctx, req.Headers(), req.Subject(), agent, verb, false)
	id := req.Headers().Get(HeaderIdempotencyKey)
	if id == "" {
		id = nuid.Next()
	}
	reply, err := h.Command(ctx, Command{Agent: agent, Verb: verb, Data: json.RawMessage(req.Data()), RequestID: id})
	if err != nil && h.hostStopped() {
		// The node is stopping: its partitions go to other nodes.
		err = ErrUnavailable.Wrapf("node %s is stopping: %w", h.own.Node(), err)
	}
	defer func() { endCommandSpan(span, err) }()
	hdr := traceHeaders(ctx)
	if err != nil {
		if StatusCode(err) == http.StatusInternalServerError {
			h.logger.Error("command failed", "agent", agent, "verb", verb, "err", err)
		}
		respondError(req, err, hdr)
		return
	}
	body, err := h.replyBody(reply)
	if err != nil {
		respondError(req, err, hdr)
		return
	}
	var opts []micro.RespondOpt
	if len(hdr) > 0 {
		opts = append(opts, micro.WithHeaders(hdr))
	}
	if err = req.Respond(body, opts...); err != nil {
		h.logger.Warn("respond", "subject", req.Subject(), "err", err)
		err = fmt.Errorf("agentd: the reply could not be sent: %w", err)
		respondError(req, err, hdr)
	}
}
