package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/audit"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/agentd/quota"
	"github.com/forever-agents/forever/auth"
)

// maxDetail bounds what a record quotes of an error or a server line.
const maxDetail = 300

// NATSCred names the credential of a command that came over NATS: the
// server checked its credential's permissions, but does not tell which
// credential sent it.
const NATSCred = "nats"

// AdminCred names the admin credential in the audit log.
const AdminCred = "admin"

// auditCommand records a command of tenant that may change an agent,
// and a request refused for its reply subject (auth.ErrReplySubject) as
// a refusal, "reply.refused", within the audit log's refusal rate.
func (ts *tenantSet) auditCommand(ctx context.Context, tenant, agent, verb string, err error) {
	if errors.Is(err, auth.ErrReplySubject) {
		ts.audit.Refused(audit.Record{Tenant: tenant, Cred: NATSCred, Action: "reply.refused", Agent: agent,
			Code: http.StatusForbidden, Detail: clip(verb + ": " + err.Error())})
		return
	}
	r := audit.Record{Tenant: tenant, Cred: NATSCred, Action: verb, Agent: agent, Outcome: audit.OK}
	if id, ok := auth.IdentityFrom(ctx); ok {
		r.Cred, r.Role, r.From = id.Cred, string(id.Role), id.From
	}
	if err != nil {
		r.Code = host.StatusCode(err)
		r.Outcome, r.Detail = outcome(r.Code), clip(err.Error())
	}
	ts.audit.Record(r)
}

// commandActor names the sender of a NATS command of tenant from its
// actor token (auth.HeaderActor), when these keys minted it for tenant
// and it has not expired: the admin, who reaches the tenant through
// agentd's own user (handleAccess). Without one, or with one that does
// not verify, the command is audited as NATSCred.
func (ts *tenantSet) commandActor(tenant string, h nats.Header) (auth.Identity, bool) {
	tok := h.Get(auth.HeaderActor)
	if tok == "" {
		return auth.Identity{}, false
	}
	cred, err := ts.op.Keys.VerifyActorToken(tok, tenant, time.Now())
	if err != nil || cred != AdminCred {
		return auth.Identity{}, false
	}
	return auth.Identity{Tenant: tenant, Cred: AdminCred, Role: auth.RoleAdmin}, true
}

// outcome is a refusal for a 4xx code but a server error's, a failure
// otherwise.
func outcome(code int) string {
	if code >= 400 && code < 500 {
		return audit.Refused
	}
	return audit.Failed
}

// auditAdmin records an admin operation: action on the tenant (and
// credential) the request names.
func (ts *tenantSet) auditAdmin(action string, data []byte, reply any, err error) {
	var req struct {
		Name string `json:"name"`
		Cred string `json:"cred"`
		Role string `json:"role"`
	}
	_ = json.Unmarshal(data, &req)
	if cr, ok := reply.(CreateReply); ok {
		req.Cred, req.Role = cr.Cred, string(cr.Role) // the name and role minted
	}
	r := audit.Record{Tenant: req.Name, Cred: AdminCred, Action: action, Outcome: audit.OK}
	if auth.CheckName(req.Name) != nil {
		r.Tenant = "" // not a usable subject token
	}
	var details []string
	if req.Cred != "" && auth.CheckCredName(req.Cred) == nil {
		details = append(details, "cred "+req.Cred)
	}
	if req.Role != "" {
		details = append(details, "role "+clip(req.Role))
	}
	if err != nil {
		r.Code, _ = host.ErrorReply(err)
		r.Outcome = outcome(r.Code)
		details = append(details, clip(err.Error()))
	}
	r.Detail = strings.Join(details, "; ")
	ts.audit.Record(r)
}

// auditRefusal records an HTTP request the front door refused.
func (ts *tenantSet) auditRefusal(r *http.Request, id auth.Identity, ref *refusal) {
	ts.audit.Refused(audit.Record{Tenant: id.Tenant, Cred: id.Cred, Role: string(id.Role), Action: "auth.refused",
		Code: ref.code, Detail: ref.reason + ": " + clip(ref.msg) + " (" + r.Method + " " + clip(r.URL.Path) + ")", From: id.From})
}

// auditQuota records a request refused for its tenant's rate.
func (ts *tenantSet) auditQuota(r *http.Request, id auth.Identity, err error) {
	var qe *quota.Error
	if !errors.As(err, &qe) {
		return
	}
	ts.audit.Refused(audit.Record{Tenant: id.Tenant, Cred: id.Cred, Role: string(id.Role), Action: "quota.refused",
		Code: http.StatusTooManyRequests, Detail: clip(err.Error()), From: id.From})
}

// natsDenied records a client the NATS server refused, naming its tenant
// and credential when the server's line names its account and user.
func (ts *tenantSet) natsDenied(dn agentd.Denial) {
	r := audit.Record{Action: "nats.denied", Detail: dn.Kind + ": " + clip(dn.Detail), From: dn.From, Time: dn.Time.UTC()}
	if dn.Account != "" {
		ts.mu.Lock()
		for name, st := range ts.mu.states {
			if st.rec == nil || st.rec.Account != dn.Account {
				continue
			}
			r.Tenant = name
			for _, c := range st.rec.Creds {
				if c.User == dn.User {
					r.Cred, r.Role = c.Name, string(c.Role)
				}
			}
		}
		ts.mu.Unlock()
	}
	ts.audit.Refused(r)
}

// clip shortens s to maxDetail bytes on one line.
func clip(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > maxDetail {
		return s[:maxDetail] + "..."
	}
	return s
}
