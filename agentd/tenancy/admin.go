package tenancy

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/internal/apierror"
)

// Admin subjects, in agentd's own account: only the admin credential and
// agentd reach them.
const (
	AdminCreateSubject      = "forever.admin.tenant.create"
	AdminRevokeSubject      = "forever.admin.tenant.revoke"
	AdminDisableSubject     = "forever.admin.tenant.disable"
	AdminEnableSubject      = "forever.admin.tenant.enable"
	AdminTokenRevokeSubject = "forever.admin.tenant.token.revoke"
)

// CreateRequest is the payload of AdminCreateSubject. Role, Expires and
// Cred describe the credential minted: its role (auth.ParseRole; default
// writer), how long it lives (auth.ParseExpiry: "720h", "30d"; empty:
// never) and its name (auth.CheckCredName; default cred-<random>), unique
// in the tenant.
type CreateRequest struct {
	Name  string     `json:"name"`
	Quota auth.Quota `json:"quota"`
	// Budget sets the tenant's spend limits: each limit it sets replaces
	// the stored one (0 removes it), the others stay.
	Budget  auth.Budget `json:"budget,omitzero"`
	Role    string      `json:"role,omitempty"`
	Expires string      `json:"expires,omitempty"`
	Cred    string      `json:"cred,omitempty"`
}

// CreateReply is its reply: a fresh credential. Creating a tenant that
// exists mints another credential for it (Created false) and leaves its
// quota as it was unless the request sets one. Quota is the quota stored
// (zero fields: the node's defaults, -1 unlimited), Limits the one
// enforced.
type CreateReply struct {
	Tenant  string     `json:"tenant"`
	Account string     `json:"account"`
	Token   string     `json:"token"`
	Creds   string     `json:"creds"`
	Created bool       `json:"created"`
	Quota   auth.Quota `json:"quota"`
	Limits  auth.Quota `json:"limits"`
	// Budget is the tenant's spend limits as stored.
	Budget auth.Budget `json:"budget,omitzero"`
	Cred   string      `json:"cred"`
	Role   auth.Role   `json:"role"`
	// Expires is when the credential stops working (RFC 3339), empty for
	// never.
	Expires string `json:"expires,omitempty"`
}

// RevokeRequest is the payload of AdminRevokeSubject, AdminDisableSubject
// and AdminEnableSubject.
type RevokeRequest struct {
	Name string `json:"name"`
}

// RevokeReply says how many credentials were revoked.
type RevokeReply struct {
	Tenant  string `json:"tenant"`
	Revoked int    `json:"revoked"`
}

// StateReply is the reply of AdminDisableSubject and AdminEnableSubject.
type StateReply struct {
	Tenant   string `json:"tenant"`
	Disabled bool   `json:"disabled"`
}

// TokenRevokeRequest is the payload of AdminTokenRevokeSubject: the
// credential Cred of tenant Name.
type TokenRevokeRequest struct {
	Name string `json:"name"`
	Cred string `json:"cred"`
}

// TokenRevokeReply says whether the credential was live.
type TokenRevokeReply struct {
	Tenant  string `json:"tenant"`
	Cred    string `json:"cred"`
	Revoked bool   `json:"revoked"`
}

func (ts *tenantSet) startAdmin(nc *nats.Conn) error {
	svc, err := micro.AddService(nc, micro.Config{
		Name:        "forever-admin",
		Version:     "0.2.0",
		Description: "Forever tenants: create, revoke, disable, enable and move tenants and their credentials",
	})
	if err != nil {
		return fmt.Errorf("agentd: add admin service: %w", err)
	}
	for _, e := range []struct {
		name, action, subject string
		h                     func(context.Context, []byte) (any, error)
		timeout               time.Duration // 0: adminTimeout
	}{
		{"tenant-create", "tenant.create", AdminCreateSubject, ts.handleCreate, 0},
		{"tenant-revoke", "tenant.revoke", AdminRevokeSubject, ts.handleRevoke, 0},
		{"tenant-disable", "tenant.disable", AdminDisableSubject, ts.handleDisable, 0},
		{"tenant-enable", "tenant.enable", AdminEnableSubject, ts.handleEnable, 0},
		{"tenant-token-revoke", "tenant.token.revoke", AdminTokenRevokeSubject, ts.handleTokenRevoke, 0},
		// A move stops the tenant, copies its log and starts it again.
		{"tenant-move", "tenant.move", AdminMoveSubject, ts.handleMove, moveTimeout + 3*tenantStartTimeout},
		{"tenant-access", "tenant.access", AdminAccessSubject, ts.handleAccess, 0},
		{"audit-record", "", AdminAuditSubject, ts.handleAuditRecord, 0}, // records itself
		// The node's view for the admin's credential (agentd cluster): in
		// the service account no host serves it, the tenants' daemons
		// serve their accounts'. A read, not audited.
		{"cluster", "", host.ClusterSubject(ts.deps.Log.Prefix()), ts.handleCluster, 0},
	} {
		h, action, timeout := e.h, e.action, cmp.Or(e.timeout, adminTimeout)
		err := svc.AddEndpoint(e.name, micro.HandlerFunc(func(req micro.Request) {
			go ts.serveAdmin(req, action, timeout, h)
		}), micro.WithEndpointSubject(e.subject))
		if err != nil {
			return fmt.Errorf("agentd: add admin endpoint: %w", err)
		}
	}
	return nil
}

// handleCluster answers the admin's cluster request with the node's view
// (agentd.Daemon.ClusterInfo), as the tenants' daemons answer theirs.
func (ts *tenantSet) handleCluster(ctx context.Context, _ []byte) (any, error) {
	return ts.parent.ClusterInfo(ctx)
}

// adminTimeout bounds an admin request's handling: a create waits for
// the tenant's daemon to start.
const adminTimeout = tenantStartTimeout + 10*time.Second

func (ts *tenantSet) serveAdmin(req micro.Request, action string, timeout time.Duration, h func(context.Context, []byte) (any, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	reply, err := h(ctx, req.Data())
	if action != "" {
		ts.auditAdmin(action, req.Data(), reply, err)
	}
	if err != nil {
		code, msg := host.ErrorReply(err)
		body, _ := json.Marshal(map[string]any{"error": msg, "code": code})
		_ = req.Respond(body, host.ErrorHeaders(code, msg))
		return
	}
	_ = req.RespondJSON(reply)
}

// refused is err, which auth returned, as an error of class (a 400, a
// 404) that says format with auth's sentence for its %s (auth's errors
// declare one), as in "%s (--role)".
func refused(class *apierror.Error, err error, format string) error {
	msg := apierror.Text(class.Code)
	if e := apierror.Declared(err); e != nil {
		msg = e.Message
	}
	return class.Wrapf(format, msg).WithCause(err)
}

// handleCreate creates the tenant (or finds it), mints a credential (a
// client user and an HTTP token with one name, role and expiry), stores
// them, pushes the account JWT and waits for the tenant's daemon to be
// ready, so the credential works when it returns.
func (ts *tenantSet) handleCreate(ctx context.Context, data []byte) (any, error) {
	var req CreateRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, host.ErrBadRequest.Wrapf("tenant create: %v", err)
	}
	if err := auth.CheckName(req.Name); err != nil {
		return nil, refused(host.ErrBadRequest, err, "%s")
	}
	if err := req.Quota.Validate(); err != nil {
		return nil, refused(host.ErrBadRequest, err, "%s")
	}
	if err := req.Budget.Validate(); err != nil {
		return nil, refused(host.ErrBadRequest, err, "%s")
	}
	role, err := auth.ParseRole(req.Role)
	if err != nil {
		return nil, refused(host.ErrBadRequest, err, "%s (--role)")
	}
	ttl, err := auth.ParseExpiry(req.Expires)
	if err != nil {
		return nil, refused(host.ErrBadRequest, err, "%s (--expires)")
	}
	if req.Cred != "" {
		if err := auth.CheckCredName(req.Cred); err != nil {
			return nil, refused(host.ErrBadRequest, err, "%s (--token-name)")
		}
	}
	var reply CreateReply
	t, err := ts.update(ctx, req.Name, true, func(t *auth.Tenant, isNew bool) error {
		if t.Disabled {
			return host.ErrConflict.Wrapf("tenant %s is disabled: agentd tenant enable %s first", t.Name, t.Name)
		}
		if t.Moving {
			return errMoving(t.Name)
		}
		if !isNew && req.Quota == (auth.Quota{}) {
			req.Quota = t.Quota
		}
		t.Quota = req.Quota
		t.Budget = t.Budget.Merge(req.Budget)
		now := time.Now()
		c := auth.Credential{Name: req.Cred, Role: role, Created: now.Unix()}
		if c.Name == "" {
			c.Name = newCredName()
		}
		if t.Cred(c.Name) != nil {
			return host.ErrConflict.Wrapf("tenant %s already has a credential named %s (names are never reused: pick another --token-name)", t.Name, c.Name)
		}
		if ttl > 0 {
			c.Expires = now.Add(ttl).Unix()
		}
		limits := ts.parent.Config().TenantQuota(t.Quota)
		client, err := ts.op.Keys.TenantClientUser(t, c, limits)
		if err != nil {
			return err
		}
		creds, err := client.Creds()
		if err != nil {
			return err
		}
		token, hash, err := auth.NewToken()
		if err != nil {
			return err
		}
		c.User, c.Token = client.PublicKey, hash
		t.Clients = append(t.Clients, client.PublicKey)
		t.Creds = append(t.Creds, c)
		reply = CreateReply{Tenant: t.Name, Account: t.Account, Token: token,
			Creds: string(creds), Created: isNew, Quota: t.Quota, Limits: limits, Budget: t.Budget, Cred: c.Name, Role: c.Role}
		if c.Expires != 0 {
			reply.Expires = time.Unix(c.Expires, 0).UTC().Format(time.RFC3339)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, tenantStartTimeout)
	defer cancel()
	if err := ts.waitThroughStops(wctx, t.Name); err != nil {
		return nil, err
	}
	ts.logger.Info("tenant credential minted", "tenant", t.Name, "created", reply.Created, "cred", reply.Cred, "role", reply.Role, "expires", reply.Expires)
	return reply, nil
}

// newCredName names a credential minted without --token-name.
func newCredName() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "cred-" + hex.EncodeToString(b[:])
}

// handleRevoke revokes every credential of the tenant: its client users
// join the account's revocation list (the server closes their connections
// when it gets the update), its HTTP tokens are dropped, OIDC tokens
// issued until now are refused, and every request it has open is ended.
func (ts *tenantSet) handleRevoke(ctx context.Context, data []byte) (any, error) {
	var req RevokeRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, host.ErrBadRequest.Wrapf("tenant revoke: %v", err)
	}
	if err := auth.CheckName(req.Name); err != nil {
		return nil, refused(host.ErrBadRequest, err, "%s")
	}
	var n int
	_, err := ts.update(ctx, req.Name, false, func(t *auth.Tenant, _ bool) error {
		n = t.RevokeAll(time.Now())
		return nil
	})
	if err != nil {
		return nil, err
	}
	ts.logger.Info("tenant credentials revoked", "tenant", req.Name, "revoked", n)
	return RevokeReply{Tenant: req.Name, Revoked: n}, nil
}

// handleDisable disables the tenant: every credential, token and OIDC
// token is refused, its open requests ended, its daemon stopped, and its
// account takes no connection (the server closes those it has). Its data
// and credentials stay, for enable.
func (ts *tenantSet) handleDisable(ctx context.Context, data []byte) (any, error) {
	return ts.setDisabled(ctx, data, true)
}

// handleEnable undoes disable: the credentials that were live work again.
func (ts *tenantSet) handleEnable(ctx context.Context, data []byte) (any, error) {
	return ts.setDisabled(ctx, data, false)
}

func (ts *tenantSet) setDisabled(ctx context.Context, data []byte, disabled bool) (any, error) {
	var req RevokeRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, host.ErrBadRequest.Wrapf("tenant state: %v", err)
	}
	if err := auth.CheckName(req.Name); err != nil {
		return nil, refused(host.ErrBadRequest, err, "%s")
	}
	set := func(t *auth.Tenant, _ bool) error {
		if t.Moving {
			return errMoving(t.Name)
		}
		t.Disabled = disabled
		return nil
	}
	if disabled {
		// This node's daemon stops before the account refuses its
		// connection, so it hands its partitions off cleanly.
		t, rev, err := ts.updateRecord(ctx, req.Name, false, set)
		if err != nil {
			return nil, err
		}
		if ts.remember(t, rev) {
			ts.apply(t)
		}
		ts.waitStopped(ctx, t.Name)
		if err := ts.pushLatest(ctx, t.Name); err != nil {
			return nil, err
		}
	} else {
		t, err := ts.update(ctx, req.Name, false, set)
		if err != nil {
			return nil, err
		}
		wctx, cancel := context.WithTimeout(ctx, tenantStartTimeout)
		defer cancel()
		if err := ts.waitStarted(wctx, t.Name); err != nil {
			return nil, err
		}
	}
	ts.logger.Info("tenant state changed", "tenant", req.Name, "disabled", disabled)
	return StateReply{Tenant: req.Name, Disabled: disabled}, nil
}

// waitStopped waits, bounded by ctx and tenantStartTimeout, until tenant
// name has no daemon on this node.
func (ts *tenantSet) waitStopped(ctx context.Context, name string) {
	ctx, cancel := context.WithTimeout(ctx, tenantStartTimeout)
	defer cancel()
	for {
		ts.mu.Lock()
		run := ts.mu.runs[name]
		ts.mu.Unlock()
		if run == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-run.done:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitStarted waits until the tenant has a daemon that is ready: after an
// enable, the disabled daemon's stop has to finish first.
func (ts *tenantSet) waitStarted(ctx context.Context, name string) error {
	for {
		err := ts.waitReady(ctx, name)
		if err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// handleTokenRevoke revokes one credential of the tenant: its user joins
// the account's revocation list, its token is refused, the requests it
// has open are ended.
func (ts *tenantSet) handleTokenRevoke(ctx context.Context, data []byte) (any, error) {
	var req TokenRevokeRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, host.ErrBadRequest.Wrapf("tenant token revoke: %v", err)
	}
	if err := auth.CheckName(req.Name); err != nil {
		return nil, refused(host.ErrBadRequest, err, "%s")
	}
	if err := auth.CheckCredName(req.Cred); err != nil {
		return nil, refused(host.ErrBadRequest, err, "%s")
	}
	var live bool
	_, err := ts.update(ctx, req.Name, false, func(t *auth.Tenant, _ bool) error {
		var err error
		if live, err = t.RevokeCred(req.Cred, time.Now()); err != nil {
			return refused(host.ErrNotFound, err, "%s")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	ts.logger.Info("tenant credential revoked", "tenant", req.Name, "cred", req.Cred, "was_live", live)
	return TokenRevokeReply{Tenant: req.Name, Cred: req.Cred, Revoked: live}, nil
}

// update reads tenant name's record (creating it when create is set),
// applies fn, stores it by compare-and-set (retrying a lost race), pushes
// the account JWT and applies the record on this node.
func (ts *tenantSet) update(ctx context.Context, name string, create bool, fn func(t *auth.Tenant, isNew bool) error) (*auth.Tenant, error) {
	t, rev, err := ts.updateRecord(ctx, name, create, fn)
	if err != nil {
		return nil, err
	}
	fresh := ts.remember(t, rev)
	if err := ts.pushLatest(ctx, t.Name); err != nil {
		return nil, err
	}
	if fresh {
		ts.apply(t)
	}
	return t, nil
}

// updateRecord is update without the push and the apply; it returns the
// record stored and its revision.
func (ts *tenantSet) updateRecord(ctx context.Context, name string, create bool, fn func(t *auth.Tenant, isNew bool) error) (*auth.Tenant, uint64, error) {
	for attempt := 0; ; attempt++ {
		var t *auth.Tenant
		var rev uint64
		e, err := ts.kv.Get(ctx, name)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if !create {
				return nil, 0, host.ErrNotFound.Wrapf("tenant %q", name)
			}
			if t, err = auth.NewTenant(name, time.Now()); err != nil {
				return nil, 0, err
			}
		case err != nil:
			return nil, 0, host.ErrUnavailable.Wrapf("tenant registry: %w", err)
		default:
			t, rev = &auth.Tenant{}, e.Revision()
			if err := json.Unmarshal(e.Value(), t); err != nil {
				return nil, 0, fmt.Errorf("tenant %q: stored record: %w", name, err)
			}
		}
		if err := fn(t, rev == 0); err != nil {
			return nil, 0, err
		}
		b, err := json.Marshal(t)
		if err != nil {
			return nil, 0, err
		}
		var stored uint64
		if rev == 0 {
			stored, err = ts.kv.Create(ctx, name, b)
		} else {
			stored, err = ts.kv.Update(ctx, name, b, rev)
		}
		if err != nil && attempt < 5 && (errors.Is(err, jetstream.ErrKeyExists) || isWrongSequence(err)) {
			continue
		}
		if err != nil {
			return nil, 0, host.ErrUnavailable.Wrapf("tenant registry: %w", err)
		}
		return t, stored, nil
	}
}

func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}
