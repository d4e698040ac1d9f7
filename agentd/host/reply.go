package host

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/forever-agents/forever/agentd"
)

// inboxRequest is a request of the NATS service whose answers go out
// through agentd.Deps.Reply, the replier's connection on a tenant's
// daemon, which may publish only under _INBOX., instead of the
// subscribing connection of agentd's own user, which may publish
// anywhere in the account. admit wraps every request it admitted (its
// reply subject checked, auth.CheckReply) in one, so even a subject that
// check let through cannot make an answer a write.
type inboxRequest struct {
	micro.Request
	deps *agentd.Deps
}

// viaReplier wraps req so its answers go out through deps.Reply; without
// a replier (no tenant, or no deps in a test) req answers itself.
func viaReplier(req micro.Request, deps *agentd.Deps) micro.Request {
	if deps == nil || deps.Replies == nil || deps.Replies == deps.Conn {
		return req
	}
	return &inboxRequest{Request: req, deps: deps}
}

// Respond answers on the request's reply subject through the replier.
func (r *inboxRequest) Respond(data []byte, opts ...micro.RespondOpt) error {
	m := &nats.Msg{Subject: r.Reply(), Data: data}
	for _, o := range opts {
		o(m)
	}
	if err := r.deps.Reply(m); err != nil {
		return fmt.Errorf("%w: %w", micro.ErrRespond, err)
	}
	return nil
}

// RespondJSON answers v as JSON through the replier.
func (r *inboxRequest) RespondJSON(v any, opts ...micro.RespondOpt) error {
	b, err := json.Marshal(v)
	if err != nil {
		return micro.ErrMarshalResponse
	}
	return r.Respond(b, opts...)
}

// Error answers a micro service error through the replier, with the
// headers micro's own Error sets.
func (r *inboxRequest) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	if code == "" || description == "" {
		return fmt.Errorf("%w: error code and description", micro.ErrArgRequired)
	}
	opts = append([]micro.RespondOpt{micro.WithHeaders(micro.Headers{
		micro.ErrorHeader:     []string{description},
		micro.ErrorCodeHeader: []string{code},
	})}, opts...)
	return r.Respond(data, opts...)
}
