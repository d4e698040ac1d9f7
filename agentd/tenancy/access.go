package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/auth"
)

// AdminAccessSubject answers the admin credential with a credential of
// agentd's own user in each tenant's account, which reaches every stream
// of the account: agentd backup and restore use them, and keep them in
// memory only.
const AdminAccessSubject = "forever.admin.tenant.access"

// AccessRequest asks for the credentials of Tenants, each once its daemon
// runs on the node that answers (a restore waits for that), or of every
// tenant of the registry when Tenants is empty (a backup).
type AccessRequest struct {
	Tenants []string `json:"tenants,omitempty"`
}

// AccessReply holds one credential per tenant, by name.
type AccessReply struct {
	Tenants []TenantAccess `json:"tenants"`
}

// TenantAccess is a creds file of a user of the tenant's account.
type TenantAccess struct {
	Tenant string `json:"tenant"`
	Creds  string `json:"creds"`
	// Actor is an actor token (auth.ActorToken) naming the admin: a
	// command sent with these creds carries it in auth.HeaderActor so
	// that the audit log names the admin, not agentd's user.
	Actor string `json:"actor,omitempty"`
}

// handleAccess mints the credentials AccessRequest asks for. A named
// tenant the registry does not hold is 404; one whose daemon is not
// ready within tenantStartTimeout, 503.
func (ts *tenantSet) handleAccess(ctx context.Context, data []byte) (any, error) {
	var req AccessRequest
	if len(data) > 0 {
		if err := json.Unmarshal(data, &req); err != nil {
			return nil, host.ErrBadRequest.Wrapf("tenant access: %v", err)
		}
	}
	names, wait := req.Tenants, len(req.Tenants) > 0
	if !wait {
		keys, err := ts.kv.ListKeys(ctx)
		if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, host.ErrUnavailable.Wrapf("tenant registry: %w", err)
		}
		if err == nil {
			for k := range keys.Keys() {
				names = append(names, k)
			}
		}
		slices.Sort(names)
	}
	reply := AccessReply{Tenants: []TenantAccess{}}
	for _, name := range names {
		if err := auth.CheckName(name); err != nil {
			return nil, refused(host.ErrBadRequest, err, "%s")
		}
		t, err := ts.readRecord(ctx, name)
		if err != nil {
			return nil, err
		}
		if wait {
			wctx, cancel := context.WithTimeout(ctx, tenantStartTimeout)
			err := ts.waitReady(wctx, name)
			cancel()
			if err != nil {
				return nil, err
			}
		}
		user, err := ts.op.Keys.TenantRuntimeUser(t)
		if err != nil {
			return nil, err
		}
		creds, err := user.Creds()
		if err != nil {
			return nil, err
		}
		actor, err := ts.op.Keys.ActorToken(name, AdminCred, time.Now())
		if err != nil {
			return nil, err
		}
		reply.Tenants = append(reply.Tenants, TenantAccess{Tenant: name, Creds: string(creds), Actor: actor})
	}
	ts.logger.Info("tenant access granted to the admin", "tenants", len(reply.Tenants))
	return reply, nil
}
