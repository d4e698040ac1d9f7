package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/apierror"
	"github.com/forever-agents/forever/tracing"
)

// Routing: any node takes a command (the micro service's queue group spreads
// them), and the node that owns the agent's partition runs it. A node that
// does not own the partition forwards the command to the owner's node
// subject, <prefix>.node.<server name>.cmd.<agent>.<verb>, and relays the
// reply. During a handoff or a failover there is no owner for a moment: the
// command waits for the new one, at most handoffWait, then fails with 503.
const (
	handoffWait  = 10 * time.Second
	routeBackoff = 50 * time.Millisecond
)

// Micro service error headers, as nats.go's micro package sets them.
const (
	headerServiceError     = "Nats-Service-Error"
	headerServiceErrorCode = "Nats-Service-Error-Code"
	// headerNotHere marks a forwarded command's error reply that says the
	// node does not own the agent (any more): the forwarder waits for the
	// partition's owner and sends it again. Other errors, 503s included (a
	// full store, an overloaded node), are relayed as they are.
	headerNotHere = "Forever-Not-Here"
)

// RemoteError is an error answered by the node that owns the agent, with
// its status code.
type RemoteError struct {
	Node string
	Code int
	Msg  string
	// NotHere says the node did not run the command because it does not
	// own the agent now: the forwarder tries the next owner.
	NotHere bool
}

func (e *RemoteError) Error() string { return e.Msg }

// StatusCode is the code the owner answered with.
func (e *RemoteError) StatusCode() int { return e.Code }

// APIError is the owner's answer, as it sent it.
func (e *RemoteError) APIError() *apierror.Error {
	return apierror.New(apierror.Known(e.Code), "%s", e.Msg).WithCause(e)
}

// Unwrap makes an answer "not here" match ErrUnavailable, so the
// forwarder retries it.
func (e *RemoteError) Unwrap() error {
	if e.NotHere {
		return ErrUnavailable
	}
	return nil
}

// retryable reports whether a command may be sent again: nobody ran it (no
// owner here, no responder there, or the owner answered 503).
func retryable(err error) bool {
	return errors.Is(err, eventlog.ErrNotOwner) || errors.Is(err, ErrUnavailable) ||
		errors.Is(err, nats.ErrNoResponders)
}

// nodeSubject is where node answers forwarded commands.
func (h *Host) nodeSubject(node, agent, verb string) string {
	return h.deps.Log.Prefix() + ".node." + node + ".cmd." + agent + "." + verb
}

// forward sends cmd to node and returns its reply as raw JSON.
func (h *Host) forward(ctx context.Context, node string, cmd Command) (out json.RawMessage, err error) {
	ctx, span := h.startForwardSpan(ctx, node, cmd)
	defer func() { endCommandSpan(span, err) }()
	m := nats.NewMsg(h.nodeSubject(node, cmd.Agent, cmd.Verb))
	m.Data = cmd.Data
	if cmd.RequestID != "" {
		m.Header.Set(headerRequestID, cmd.RequestID)
	}
	tracing.Inject(ctx, m.Header)
	resp, err := h.deps.Conn.RequestMsgWithContext(ctx, m)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, fmt.Errorf("forward to node %s: %w", node, err)
		}
		// The owner may have run it: the client decides (a chat retried
		// with the same message id is a duplicate).
		return nil, ErrTimeout.Wrapf("node %s, forwarding %s for %q: %v", node, cmd.Verb, cmd.Agent, err)
	}
	if err := remoteError(node, resp); err != nil {
		return nil, err
	}
	return resp.Data, nil
}

// remoteError is the error node answered in resp (its service error
// headers, setErrorHeaders), or nil when it answered a result.
func remoteError(node string, resp *nats.Msg) error {
	code := resp.Header.Get(headerServiceErrorCode)
	if code == "" {
		return nil
	}
	n, _ := strconv.Atoi(code)
	return &RemoteError{Node: node, Code: n, Msg: resp.Header.Get(headerServiceError), NotHere: resp.Header.Get(headerNotHere) != ""}
}

// setErrorHeaders writes err into resp, a reply to another node, as
// remoteError reads it: its code and sentence, and whether another node
// may serve the request (retryable). It returns the code and sentence.
func setErrorHeaders(resp *nats.Msg, err error) (int, string) {
	code, msg := ErrorReply(err)
	resp.Header.Set(headerServiceError, msg)
	resp.Header.Set(headerServiceErrorCode, strconv.Itoa(code))
	if retryable(err) {
		resp.Header.Set(headerNotHere, "true")
	}
	return code, msg
}

// serveNode answers the commands other nodes forward to this one. They run
// here or fail with 503; they are never forwarded again.
func (h *Host) serveNode(ctx context.Context) (func() error, error) {
	sub, err := h.deps.Conn.Subscribe(h.nodeSubject(h.own.Node(), "*", "*"), func(m *nats.Msg) {
		// Tracked with the service's commands, so the node answers them
		// before its connection drains at shutdown.
		h.handling.Add(1)
		go func() {
			defer h.handling.Done()
			h.answerForwarded(ctx, m)
		}()
	})
	if err != nil {
		return nil, fmt.Errorf("agentd: subscribe to forwarded commands: %w", err)
	}
	lsub, err := h.serveNodeList(ctx)
	if err != nil {
		sub.Unsubscribe()
		return nil, err
	}
	return func() error { return errors.Join(sub.Unsubscribe(), lsub.Unsubscribe()) }, nil
}

func (h *Host) answerForwarded(ctx context.Context, m *nats.Msg) {
	tokens := strings.Split(m.Subject, ".")
	agent, verb := tokens[len(tokens)-2], tokens[len(tokens)-1]
	base := ctx
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	ctx, span := h.startCommandSpan(ctx, m.Header, m.Subject, agent, verb, true)
	var out json.RawMessage
	_, err := h.TypeOf(agent)
	defer func() { endCommandSpan(span, err) }()
	if err == nil {
		out, err = h.local(ctx, Command{Agent: agent, Verb: verb, Data: json.RawMessage(m.Data), RequestID: m.Header.Get(headerRequestID)})
	}
	if err != nil && base.Err() != nil {
		err = ErrUnavailable.Wrapf("node %s is stopping: %w", h.own.Node(), err)
	}
	traceID := tracing.TraceID(ctx)
	if err == nil {
		var body []byte
		if body, err = h.replyBody(out); err == nil {
			resp := nats.NewMsg(m.Reply)
			if traceID != "" {
				resp.Header.Set(tracing.TraceIDHeader, traceID)
			}
			resp.Data = body
			if err = m.RespondMsg(resp); err == nil {
				return
			}
			h.logger.Warn("respond to forwarded command", "subject", m.Subject, "err", err)
			err = fmt.Errorf("agentd: the reply could not be sent: %w", err)
		}
	}
	if StatusCode(err) == http.StatusInternalServerError {
		h.logger.Error("forwarded command failed", "agent", agent, "verb", verb, "err", err)
	}
	resp := nats.NewMsg(m.Reply)
	if traceID != "" {
		resp.Header.Set(tracing.TraceIDHeader, traceID)
	}
	code, msg := setErrorHeaders(resp, err)
	resp.Data, _ = json.Marshal(map[string]any{"error": msg, "code": code})
	if err := m.RespondMsg(resp); err != nil {
		h.logger.Warn("respond to forwarded command", "subject", m.Subject, "err", err)
	}
}

// ErrorReply is the code and one-line message of a command error.
func ErrorReply(err error) (int, string) {
	e := ClientError(err)
	return e.Code, e.Message
}

// ReplyAs decodes a command reply into T: JSON, whether the command ran
// here or an owner answered it.
func ReplyAs[T any](out json.RawMessage) (T, bool) {
	var t T
	return t, json.Unmarshal(out, &t) == nil
}
