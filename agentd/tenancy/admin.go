package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/eventlog"
)

// Admin subjects, in agentd's own account: only the admin credential and
// agentd reach them.
const (
	AdminCreateSubject = "forever.admin.tenant.create"
	AdminRevokeSubject = "forever.admin.tenant.revoke"
)

// CreateRequest is the payload of AdminCreateSubject.
type CreateRequest struct {
	Name  string     `json:"name"`
	Quota auth.Quota `json:"quota"`
}

// CreateReply is its reply: a fresh client credential. Creating a
// tenant that exists mints another credential for it (Created false) and
// leaves its quota as it was unless the request sets one.
type CreateReply struct {
	Tenant  string     `json:"tenant"`
	Account string     `json:"account"`
	Token   string     `json:"token"`
	Creds   string     `json:"creds"`
	Created bool       `json:"created"`
	Quota   auth.Quota `json:"quota"`
}

// RevokeRequest is the payload of AdminRevokeSubject.
type RevokeRequest struct {
	Name string `json:"name"`
}

// RevokeReply says how many credentials were revoked.
type RevokeReply struct {
	Tenant  string `json:"tenant"`
	Revoked int    `json:"revoked"`
}

func (ts *tenantSet) startAdmin(nc *nats.Conn) error {
	svc, err := micro.AddService(nc, micro.Config{
		Name:        "forever-admin",
		Version:     "0.1.0",
		Description: "Forever tenants: create and revoke credentials",
	})
	if err != nil {
		return fmt.Errorf("agentd: add admin service: %w", err)
	}
	for _, e := range []struct {
		name, subject string
		h             func(context.Context, []byte) (any, error)
	}{
		{"tenant-create", AdminCreateSubject, ts.handleCreate},
		{"tenant-revoke", AdminRevokeSubject, ts.handleRevoke},
		{"tenant-access", AdminAccessSubject, ts.handleAccess},
	} {
		h := e.h
		err := svc.AddEndpoint(e.name, micro.HandlerFunc(func(req micro.Request) {
			go ts.serveAdmin(req, h)
		}), micro.WithEndpointSubject(e.subject))
		if err != nil {
			return fmt.Errorf("agentd: add admin endpoint: %w", err)
		}
	}
	return nil
}

func (ts *tenantSet) serveAdmin(req micro.Request, h func(context.Context, []byte) (any, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), tenantStartTimeout+10*time.Second)
	defer cancel()
	reply, err := h(ctx, req.Data())
	if err != nil {
		code, msg := host.ErrorReply(err)
		body, _ := json.Marshal(map[string]any{"error": msg, "code": code})
		_ = req.Respond(body, host.ErrorHeaders(code, msg))
		return
	}
	_ = req.RespondJSON(reply)
}

// handleCreate creates the tenant (or finds it), mints a client credential
// and an HTTP token, stores them, pushes the account JWT and waits for the
// tenant's daemon to be ready, so the credential works when it returns.
func (ts *tenantSet) handleCreate(ctx context.Context, data []byte) (any, error) {
	var req CreateRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, fmt.Errorf("%w: tenant create: %v", host.ErrBadRequest, err)
	}
	if err := auth.CheckName(req.Name); err != nil {
		return nil, fmt.Errorf("%w: %v", host.ErrBadRequest, err)
	}
	var reply CreateReply
	t, err := ts.update(ctx, req.Name, true, func(t *auth.Tenant, isNew bool) error {
		if !isNew && req.Quota == (auth.Quota{}) {
			req.Quota = t.Quota
		}
		t.Quota = req.Quota
		client, err := ts.op.Keys.TenantClientUser(t, eventlog.DefaultChunksStream)
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
		t.Clients = append(t.Clients, client.PublicKey)
		t.Tokens = append(t.Tokens, hash)
		reply = CreateReply{Tenant: t.Name, Account: t.Account, Token: token,
			Creds: string(creds), Created: isNew, Quota: t.Quota}
		return nil
	})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, tenantStartTimeout)
	defer cancel()
	if err := ts.waitReady(wctx, t.Name); err != nil {
		return nil, err
	}
	ts.logger.Info("tenant credential minted", "tenant", t.Name, "created", reply.Created)
	return reply, nil
}

// handleRevoke revokes every credential of the tenant: its client users
// join the account's revocation list (the server closes their connections
// when it gets the update) and its HTTP tokens are dropped.
func (ts *tenantSet) handleRevoke(ctx context.Context, data []byte) (any, error) {
	var req RevokeRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, fmt.Errorf("%w: tenant revoke: %v", host.ErrBadRequest, err)
	}
	if err := auth.CheckName(req.Name); err != nil {
		return nil, fmt.Errorf("%w: %v", host.ErrBadRequest, err)
	}
	var n int
	_, err := ts.update(ctx, req.Name, false, func(t *auth.Tenant, _ bool) error {
		n = len(t.Tokens)
		for _, c := range t.Clients {
			if _, ok := t.Revoked[c]; !ok {
				n++
			}
		}
		t.RevokeAll(time.Now())
		return nil
	})
	if err != nil {
		return nil, err
	}
	ts.logger.Info("tenant credentials revoked", "tenant", req.Name, "revoked", n)
	return RevokeReply{Tenant: req.Name, Revoked: n}, nil
}

// update reads tenant name's record (creating it when create is set),
// applies fn, stores it by compare-and-set (retrying a lost race), pushes
// the account JWT and applies the record on this node.
func (ts *tenantSet) update(ctx context.Context, name string, create bool, fn func(t *auth.Tenant, isNew bool) error) (*auth.Tenant, error) {
	for attempt := 0; ; attempt++ {
		var t *auth.Tenant
		var rev uint64
		e, err := ts.kv.Get(ctx, name)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if !create {
				return nil, fmt.Errorf("%w: tenant %q", host.ErrNotFound, name)
			}
			if t, err = auth.NewTenant(name, time.Now()); err != nil {
				return nil, err
			}
		case err != nil:
			return nil, fmt.Errorf("%w: tenant registry: %w", host.ErrUnavailable, err)
		default:
			t, rev = &auth.Tenant{}, e.Revision()
			if err := json.Unmarshal(e.Value(), t); err != nil {
				return nil, fmt.Errorf("tenant %q: stored record: %w", name, err)
			}
		}
		if err := fn(t, rev == 0); err != nil {
			return nil, err
		}
		b, err := json.Marshal(t)
		if err != nil {
			return nil, err
		}
		if rev == 0 {
			_, err = ts.kv.Create(ctx, name, b)
		} else {
			_, err = ts.kv.Update(ctx, name, b, rev)
		}
		if err != nil && attempt < 5 && (errors.Is(err, jetstream.ErrKeyExists) || isWrongSequence(err)) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%w: tenant registry: %w", host.ErrUnavailable, err)
		}
		if err := ts.pushAccount(ctx, t); err != nil {
			return nil, err
		}
		ts.apply(t)
		return t, nil
	}
}

func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}
