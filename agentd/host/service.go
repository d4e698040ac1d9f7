package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/quota"
)

// Command service defaults.
const (
	// MaxCommandBytes is the one size limit: the largest command payload
	// accepted over NATS, and the largest new message of a chat over HTTP
	// (413 above, apierror.OverLimit's wording on both).
	MaxCommandBytes = 512 << 10
	commandTimeout  = 30 * time.Second
)

// startService adds the NATS micro service "forever": one endpoint per verb
// on <prefix>.cmd.*.<verb>. A command is acknowledged only after what it
// changes is appended to the log (the handlers return after their appends).
func (h *Host) startService(_ context.Context, d *agentd.Daemon, deps *agentd.Deps) error {
	prefix := deps.Log.Prefix()
	svc, err := micro.AddService(deps.Conn, micro.Config{
		Name:        "forever",
		Version:     "0.1.0",
		Description: "Forever agent commands: " + prefix + ".cmd.<agent>.<verb>",
	})
	if err != nil {
		return fmt.Errorf("agentd: add NATS service: %w", err)
	}
	for _, verb := range h.allVerbs() {
		subject := prefix + ".cmd.*." + verb
		if err := svc.AddEndpoint(verb, h.admit(h.serveCommand), micro.WithEndpointSubject(subject)); err != nil {
			return fmt.Errorf("agentd: add endpoint %s: %w", subject, err)
		}
	}
	if err := svc.AddEndpoint("list-agents", h.admit(h.serveList), micro.WithEndpointSubject(ListSubject(prefix))); err != nil {
		return fmt.Errorf("agentd: add endpoint %s: %w", ListSubject(prefix), err)
	}
	if err := svc.AddEndpoint("cluster", h.admit(h.serveCluster(d)), micro.WithEndpointSubject(ClusterSubject(prefix))); err != nil {
		return fmt.Errorf("agentd: add endpoint %s: %w", ClusterSubject(prefix), err)
	}
	// Every other subject under <prefix>.cmd: an unknown verb or a subject
	// of another shape gets 404, never "no responders". Its queue group is
	// its own: the server picks one subscriber per queue group name among
	// all the subscriptions a message matches, so sharing the verbs' group
	// would take commands away from them.
	known, listed := h.allVerbs(), h.listedVerbs()
	unknown := func(req micro.Request) {
		if unknownVerb(req.Subject(), prefix, known) && h.replyAdmitted(req) {
			answerUnknown(viaReplier(req, h.deps), prefix, known, listed)
		}
	}
	if err := svc.AddEndpoint("unknown", micro.HandlerFunc(unknown), micro.WithEndpointSubject(prefix+".cmd.>"),
		micro.WithEndpointQueueGroup("forever-unknown")); err != nil {
		return fmt.Errorf("agentd: add endpoint %s.cmd.>: %w", prefix, err)
	}
	// The server has the endpoints' subscriptions before agentd says it
	// started: a command sent at once gets an answer, never "no responders".
	if err := deps.Conn.Flush(); err != nil {
		return fmt.Errorf("agentd: NATS service: %w", err)
	}
	return d.Add("nats service", agentd.ComponentFunc(func(ctx context.Context) error {
		unsub, err := h.serveNode(ctx)
		if err != nil {
			return err
		}
		// At shutdown the endpoints go first, before the partitions are
		// handed off, so new commands reach the other nodes; forwarded
		// commands are answered (or refused with 503) until the end.
		var stopErr error
		select {
		case <-d.Stopping():
			stopErr = svc.Stop()
			<-ctx.Done()
		case <-ctx.Done():
			stopErr = svc.Stop()
		}
		// No new forwarded command after this; those running answer (their
		// ctx ended with the host's) before the connection drains.
		unsubErr := unsub()
		h.handling.Wait()
		return errors.Join(unsubErr, stopErr)
	}))
}

// MaxCommandsInFlight bounds the commands a node runs at once; past it a
// command is refused with 503 and Retry-After.
const MaxCommandsInFlight = 1024

// replyHeadroom is what a reply leaves of the server's max payload for its
// headers and subject.
const replyHeadroom = 4 << 10

// ReplyLimit returns the largest reply body a command may send on a server
// whose max payload is maxPayload: that less headroom for headers. A verb
// whose replies grow with the data (messages) pages them to fit.
func ReplyLimit(maxPayload int64) int { return int(maxPayload) - replyHeadroom }

// MaxReply is ReplyLimit of the daemon's connection.
func (h *Host) MaxReply() int { return ReplyLimit(h.deps.Conn.MaxPayload()) }

// replyBody is a command's reply as one NATS message's body, or
// ErrTooLarge when it does not fit one: a reply is an answer or an
// error, never silence.
func (h *Host) replyBody(body json.RawMessage) ([]byte, error) {
	if len(body) > h.MaxReply() {
		return nil, ErrTooLarge.Wrapf("the reply is %d bytes, more than one NATS message carries (%d, the server's max payload less headers)", len(body), h.MaxReply())
	}
	return body, nil
}

// unknownVerb reports whether a request on <prefix>.cmd.> is one no
// verb's endpoint takes: a subject that is not <prefix>.cmd.<agent>.<verb>
// or a verb no agent type has. A command of a known verb is left to its
// endpoint, which the request reached too.
func unknownVerb(subject, prefix string, known []string) bool {
	tokens := strings.Split(strings.TrimPrefix(subject, prefix+".cmd."), ".")
	return len(tokens) != 2 || !slices.Contains(known, tokens[1])
}

// answerUnknown answers a request on <prefix>.cmd.> that no verb's
// endpoint takes (unknownVerb) with 404.
func answerUnknown(req micro.Request, prefix string, known, listed []string) {
	tokens := strings.Split(strings.TrimPrefix(req.Subject(), prefix+".cmd."), ".")
	switch {
	case len(tokens) != 2:
		RespondError(req, ErrNotFound.Wrapf("subject %q is not %s.cmd.<agent>.<verb> (an agent id has no '.')", req.Subject(), prefix))
	case !slices.Contains(known, tokens[1]):
		RespondError(req, ErrNotFound.Wrapf("no verb %q; the verbs are %s", tokens[1], strings.Join(listed, ", ")))
	}
}

// RespondError answers a micro service request with err as an error reply:
// its code (StatusCode) and one-line message in the headers and as the
// JSON body {"error","code"}, with Retry-After for 429 and 503.
func RespondError(req micro.Request, err error) { respondError(req, err, nil) }

// respondError is RespondError with more headers (the trace id).
func respondError(req micro.Request, err error, hdr micro.Headers) {
	e := ClientError(err)
	opts := []micro.RespondOpt{ErrorHeaders(e.Code, e.Message)}
	if len(hdr) > 0 {
		opts = append(opts, micro.WithHeaders(hdr))
	}
	switch {
	case e.RetryAfter > 0:
		opts = append(opts, micro.WithHeaders(micro.Headers{"Retry-After": []string{quota.RetryAfterSeconds(e.RetryAfter)}}))
	case e.Code == http.StatusServiceUnavailable:
		// Nothing ran: the client may retry, after this many seconds.
		opts = append(opts, micro.WithHeaders(micro.Headers{"Retry-After": []string{RetryAfterSeconds}}))
	}
	_ = req.Respond(e.AppendJSON(nil), opts...)
}

// ErrorHeaders are a micro service error's headers. Handlers answer
// errors with Respond and these, not with Request.Error: commands are
// answered from goroutines of their own (handle), and Error records the
// error in the request, which the micro service reads for its stats once
// the handler returned, a data race (the race detector caught it). Respond
// records nothing on success; the stats then count the request, not its
// error.
func ErrorHeaders(code int, msg string) micro.RespondOpt {
	return micro.WithHeaders(micro.Headers{
		micro.ErrorHeader:     []string{msg},
		micro.ErrorCodeHeader: []string{strconv.Itoa(code)},
	})
}

// RetryAfterSeconds is the Retry-After of a 503, over NATS (a header of the
// error reply) and HTTP.
const RetryAfterSeconds = "1"
