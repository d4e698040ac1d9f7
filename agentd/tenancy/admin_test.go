package tenancy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd/audit"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/agentd/tenancy"
	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/internal/waitfor"
)

// TestAdminBadRequests: every admin endpoint answers bad input with a 400
// that says what is wrong (naming the flag for the CLI's), and a tenant or
// credential nobody created with a 404; each answer carries its code in
// the header and {"error","code"} in its body, and nothing is created.
func TestAdminBadRequests(t *testing.T) {
	n := startNode(t)
	n.create(t, tenancy.CreateRequest{Name: "acme", Cred: "ci"})
	for _, c := range []struct {
		name, subject string
		req           any
		code, says    string
	}{
		{"create: not json", tenancy.AdminCreateSubject, `{`, "400", "tenant create"},
		{"create: no name", tenancy.AdminCreateSubject, tenancy.CreateRequest{}, "400", "tenant"},
		{"create: bad name", tenancy.AdminCreateSubject, tenancy.CreateRequest{Name: "Not A Name!"}, "400", "tenant"},
		{"create: bad role", tenancy.AdminCreateSubject, tenancy.CreateRequest{Name: "beta", Role: "boss"}, "400", "(--role)"},
		{"create: bad expiry", tenancy.AdminCreateSubject, tenancy.CreateRequest{Name: "beta", Expires: "soon"}, "400", "(--expires)"},
		{"create: bad cred name", tenancy.AdminCreateSubject, tenancy.CreateRequest{Name: "beta", Cred: "has space"}, "400", "(--token-name)"},
		{"create: negative quota", tenancy.AdminCreateSubject, tenancy.CreateRequest{Name: "beta", Quota: auth.Quota{Rate: -5}}, "400", "--rate"},
		{"create: cred name taken", tenancy.AdminCreateSubject, tenancy.CreateRequest{Name: "acme", Cred: "ci"}, "409", "already has a credential named ci"},
		{"revoke: not json", tenancy.AdminRevokeSubject, `[]`, "400", "tenant revoke"},
		{"revoke: nobody's", tenancy.AdminRevokeSubject, tenancy.RevokeRequest{Name: "ghost"}, "404", `"ghost"`},
		{"disable: nobody's", tenancy.AdminDisableSubject, tenancy.RevokeRequest{Name: "ghost"}, "404", `"ghost"`},
		{"enable: nobody's", tenancy.AdminEnableSubject, tenancy.RevokeRequest{Name: "ghost"}, "404", `"ghost"`},
		{"enable: bad name", tenancy.AdminEnableSubject, tenancy.RevokeRequest{Name: "a.b"}, "400", "tenant"},
		{"token revoke: nobody's cred", tenancy.AdminTokenRevokeSubject, tenancy.TokenRevokeRequest{Name: "acme", Cred: "ghost"}, "404", "ghost"},
		{"token revoke: bad cred name", tenancy.AdminTokenRevokeSubject, tenancy.TokenRevokeRequest{Name: "acme", Cred: "a b"}, "400", "credential"},
		{"token revoke: nobody's tenant", tenancy.AdminTokenRevokeSubject, tenancy.TokenRevokeRequest{Name: "ghost", Cred: "ci"}, "404", `"ghost"`},
		{"move: not json", tenancy.AdminMoveSubject, `{`, "400", "tenant move"},
		{"move: bad name", tenancy.AdminMoveSubject, tenancy.RevokeRequest{Name: "a b"}, "400", "tenant"},
		{"move: an unsharded node", tenancy.AdminMoveSubject, tenancy.RevokeRequest{Name: "acme"}, "409", "unsharded"},
		{"access: not json", tenancy.AdminAccessSubject, `{`, "400", "tenant access"},
		{"access: nobody's", tenancy.AdminAccessSubject, tenancy.AccessRequest{Tenants: []string{"ghost"}}, "404", `"ghost"`},
		{"access: bad name", tenancy.AdminAccessSubject, tenancy.AccessRequest{Tenants: []string{"a b"}}, "400", "tenant"},
		{"audit: not json", tenancy.AdminAuditSubject, `{`, "400", "audit record"},
		{"audit: unknown action", tenancy.AdminAuditSubject, tenancy.AuditRecordRequest{Action: "tenant.create"}, "400", `action "tenant.create"`},
		{"audit: unknown outcome", tenancy.AdminAuditSubject, tenancy.AuditRecordRequest{Action: "restore", Outcome: "maybe"}, "400", `outcome "maybe"`},
		{"audit: bad tenant", tenancy.AdminAuditSubject, tenancy.AuditRecordRequest{Action: "restore", Tenants: []string{"a b"}}, "400", "audit record"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body := n.request(t, c.subject, c.req)
			var reply struct {
				Error string
				Code  int
			}
			if err := json.Unmarshal(body, &reply); err != nil {
				t.Fatalf("reply %s: %v", body, err)
			}
			if code != c.code || fmt.Sprint(reply.Code) != c.code || !strings.Contains(reply.Error, c.says) {
				t.Errorf("%s %v: %s %s, want %s saying %q", c.subject, c.req, code, body, c.code, c.says)
			}
		})
	}
	var access tenancy.AccessReply
	n.must(t, tenancy.AdminAccessSubject, tenancy.AccessRequest{}, &access)
	if len(access.Tenants) != 1 || access.Tenants[0].Tenant != "acme" {
		t.Errorf("tenants after the bad requests: %+v, want acme alone", access.Tenants)
	}
}

// TestCreateAgain: tenant create on a tenant that exists mints another
// credential of the same account (Created false) and keeps the stored
// quota unless the request sets one; budgets merge. A disabled tenant
// gets no credential until it is enabled.
func TestCreateAgain(t *testing.T) {
	n := startNode(t)
	first := n.create(t, tenancy.CreateRequest{Name: "acme", Quota: auth.Quota{Agents: 7}, Budget: auth.Budget{Tokens: &auth.BudgetLimit{N: 1000, Period: "24h"}}})
	if !first.Created || first.Role != auth.RoleWriter || !strings.HasPrefix(first.Cred, "cred-") || first.Expires != "" || first.Quota.Agents != 7 || first.Limits.Agents != 7 {
		t.Errorf("first create: %+v, want a new tenant, a writer cred-… never expiring, 7 agents", first)
	}
	again := n.create(t, tenancy.CreateRequest{Name: "acme", Role: "reader", Cred: "dash", Expires: "30d", Budget: auth.Budget{Cost: &auth.BudgetLimit{N: 5, Period: "24h"}}})
	if again.Created || again.Account != first.Account || again.Role != auth.RoleReader || again.Cred != "dash" || again.Quota.Agents != 7 {
		t.Errorf("second create: %+v, want the same account, a reader dash, the quota kept", again)
	}
	if b := again.Budget; b.Tokens == nil || b.Tokens.N != 1000 || b.Cost == nil || b.Cost.N != 5 {
		t.Errorf("budget after the second create: %+v, want tokens 1000 and cost 5", again.Budget)
	}
	if exp, err := time.Parse(time.RFC3339, again.Expires); err != nil || time.Until(exp) < 29*24*time.Hour {
		t.Errorf("expires %q, want in 30 days", again.Expires)
	}
	if third := n.create(t, tenancy.CreateRequest{Name: "acme", Quota: auth.Quota{Agents: 3}}); third.Quota.Agents != 3 {
		t.Errorf("a create that sets the quota: %+v", third.Quota)
	}

	var st tenancy.StateReply
	n.must(t, tenancy.AdminDisableSubject, tenancy.RevokeRequest{Name: "acme"}, &st)
	if !st.Disabled {
		t.Fatalf("disable: %+v", st)
	}
	if code, body := n.request(t, tenancy.AdminCreateSubject, tenancy.CreateRequest{Name: "acme"}); code != "409" || !strings.Contains(string(body), "enable") {
		t.Errorf("create on a disabled tenant: %s %s, want 409 saying to enable it", code, body)
	}
	n.must(t, tenancy.AdminEnableSubject, tenancy.RevokeRequest{Name: "acme"}, &st)
	if st.Disabled {
		t.Fatalf("enable: %+v", st)
	}
	n.create(t, tenancy.CreateRequest{Name: "acme"})
}

// TestAccess: the admin's access request lists every tenant of the
// registry by name, each with a creds file of its own account and an
// actor token; named tenants, only those. The creds reach the tenant's
// agents.
func TestAccess(t *testing.T) {
	n := startNode(t)
	for _, name := range []string{"zeta", "acme"} {
		n.create(t, tenancy.CreateRequest{Name: name})
	}
	var all tenancy.AccessReply
	n.must(t, tenancy.AdminAccessSubject, tenancy.AccessRequest{}, &all)
	var names []string
	for _, a := range all.Tenants {
		names = append(names, a.Tenant)
		if a.Creds == "" || a.Actor == "" {
			t.Errorf("access to %s: creds %d bytes, actor %q", a.Tenant, len(a.Creds), a.Actor)
		}
	}
	if !slices.Equal(names, []string{"acme", "zeta"}) {
		t.Fatalf("access to every tenant: %v, want acme and zeta in order", names)
	}
	var one tenancy.AccessReply
	n.must(t, tenancy.AdminAccessSubject, tenancy.AccessRequest{Tenants: []string{"zeta"}}, &one)
	if len(one.Tenants) != 1 || one.Tenants[0].Tenant != "zeta" {
		t.Fatalf("access to zeta: %+v", one.Tenants)
	}
	nc := n.connect(t, one.Tenants[0].Creds)
	m, err := nc.Request("forever.cmd.steps:zz.status", nil, 20*time.Second)
	if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
		t.Fatalf("status with zeta's access creds: %v %s", err, m.Data)
	}
}

// TestAdminAudited: every admin operation is in the audit log under its
// tenant as the admin, with its outcome and code, a refused one too; the
// admin's own record (AdminAuditSubject) is stored once per tenant it
// names.
func TestAdminAudited(t *testing.T) {
	n := startNode(t)
	c := n.create(t, tenancy.CreateRequest{Name: "acme", Cred: "ci", Role: "approver"})
	n.request(t, tenancy.AdminCreateSubject, tenancy.CreateRequest{Name: "acme", Role: "boss"})
	n.must(t, tenancy.AdminTokenRevokeSubject, tenancy.TokenRevokeRequest{Name: "acme", Cred: c.Cred}, nil)
	var rec map[string]int
	n.must(t, tenancy.AdminAuditSubject, tenancy.AuditRecordRequest{Action: "restore", Detail: "from b1", Tenants: []string{"acme"}}, &rec)
	if rec["recorded"] != 1 {
		t.Errorf("audit record reply %v, want 1 recorded", rec)
	}
	js, err := jetstream.New(n.admin)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"tenant.create ok 0 cred ci; role approver",
		"tenant.create refused 400 role boss",
		"tenant.token.revoke ok 0 cred ci",
		"restore ok 0 from b1",
	}
	waitfor.NoError(t, func() error {
		var got []string
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		err := audit.Tail(ctx, js, "acme", 0, false, func(r audit.Record) error {
			if r.Cred != tenancy.AdminCred || r.Tenant != "acme" {
				return fmt.Errorf("record %+v not the admin's of acme", r)
			}
			got = append(got, fmt.Sprintf("%s %s %d %s", r.Action, r.Outcome, r.Code, r.Detail))
			return nil
		})
		if err != nil {
			return err
		}
		if len(got) != len(want) {
			return fmt.Errorf("the audit log of acme to hold %d records, have %q", len(want), got)
		}
		for i := range want {
			if !strings.HasPrefix(got[i], want[i]) {
				return fmt.Errorf("audit record %d %q, want it to start %q", i, got[i], want[i])
			}
		}
		return nil
	})
}

// TestTenantsApart: two tenants use the same agent id, each in its own
// account: what one's credential does is not in the other's log, and
// each credential works over NATS as soon as tenant create returns.
func TestTenantsApart(t *testing.T) {
	n := startNode(t)
	acme := n.connect(t, n.create(t, tenancy.CreateRequest{Name: "acme"}).Creds)
	beta := n.connect(t, n.create(t, tenancy.CreateRequest{Name: "beta"}).Creds)
	cmd := func(nc *nats.Conn, verb, data string) []byte {
		t.Helper()
		m, err := nc.Request("forever.cmd.steps:same."+verb, []byte(data), 20*time.Second)
		if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
			t.Fatalf("%s: %v %s", verb, err, m.Data)
		}
		return m.Data
	}
	events := func(nc *nats.Conn) int {
		t.Helper()
		var p host.LogPage
		if err := json.Unmarshal(cmd(nc, "log", `{"limit":1000}`), &p); err != nil {
			t.Fatal(err)
		}
		return len(p.Events)
	}
	cmd(acme, "start", `{"steps":2,"delayMs":0}`)
	waitfor.True(t, "acme's steps:same to log its steps", func() bool { return events(acme) > 0 })
	if got := events(beta); got != 0 {
		t.Errorf("beta's steps:same has %d events after acme's start, want none", got)
	}
}
