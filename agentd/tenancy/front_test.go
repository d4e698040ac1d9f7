package tenancy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/tenancy"
	"github.com/forever-agents/forever/internal/waitfor"
)

// TestFrontDoorRefusals: without a valid bearer token a request gets 401
// with WWW-Authenticate (a token in the query counts on the WebSocket
// endpoint only); a path the role does not reach, a tenant nobody created
// and another token than the admin's on /v1/tenants get 403; the admin's
// token without X-Forever-Tenant, 400. Each answer is {"error","code"}
// saying why, and each refusal is counted by reason. A credential works
// as soon as tenant create returns.
func TestFrontDoorRefusals(t *testing.T) {
	n := startNode(t)
	reader := n.create(t, tenancy.CreateRequest{Name: "acme", Role: "reader"}).Token
	admin, _, err := agentd.AdminToken(n.d.Config(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const status = "/v1/agents/steps:zz/status"
	for _, c := range []struct {
		name, method, path, token string
		hdr                       []string
		code                      int
		says                      string
	}{
		{"no token", "GET", status, "", nil, 401, "missing bearer token"},
		{"not bearer", "GET", status, "", []string{"Authorization", "Basic YTpi"}, 401, "missing bearer token"},
		{"unknown token", "GET", status, "fvr_nonsense", nil, 401, "invalid or revoked"},
		{"token in the query", "GET", status + "?access_token=" + reader, "", nil, 401, "missing bearer token"},
		{"reader on /debug/", "GET", "/debug/quarantine", reader, nil, 403, "needs the admin role"},
		{"admin without tenant", "GET", status, admin, nil, 400, tenancy.HeaderTenant},
		{"admin for nobody's tenant", "GET", status, admin, []string{tenancy.HeaderTenant, "ghost"}, 403, "tenant ghost does not exist"},
		{"tenants without token", "GET", "/v1/tenants", "", nil, 401, "missing bearer token"},
		{"tenants with a tenant's token", "GET", "/v1/tenants", reader, nil, 403, "admin's HTTP token"},
		{"tenants posted", "POST", "/v1/tenants", admin, nil, 405, "GET /v1/tenants only"},
		{"reader", "GET", status, reader, nil, 200, ""},
		{"admin for acme", "GET", status, admin, []string{tenancy.HeaderTenant, "acme"}, 200, ""},
		{"admin on /debug/", "GET", "/debug/quarantine", admin, []string{tenancy.HeaderTenant, "acme"}, 200, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body, h := n.do(t, c.method, c.path, c.token, c.hdr...)
			if code != c.code {
				t.Fatalf("%s %s: %d %s, want %d", c.method, c.path, code, body, c.code)
			}
			if code == 200 {
				return
			}
			var reply struct {
				Error string
				Code  int
			}
			if err := json.Unmarshal([]byte(body), &reply); err != nil || reply.Code != c.code || !strings.Contains(reply.Error, c.says) {
				t.Errorf("%s %s: %s, want code %d saying %q", c.method, c.path, body, c.code, c.says)
			}
			if got := h.Get("WWW-Authenticate"); (code == 401) != (got != "") {
				t.Errorf("%d with WWW-Authenticate %q", code, got)
			}
		})
	}

	code, body, _ := n.get(t, "/v1/tenants", admin)
	var list struct{ Tenants []tenancy.TenantInfo }
	if err := json.Unmarshal([]byte(body), &list); err != nil || code != 200 {
		t.Fatalf("GET /v1/tenants: %d %s", code, body)
	}
	if len(list.Tenants) != 1 || list.Tenants[0].Name != "acme" || !list.Tenants[0].Served || list.Tenants[0].Disabled {
		t.Errorf("tenants %+v, want acme served", list.Tenants)
	}
	_, metrics := agentdtest.Get(t, "http://"+n.d.MetricsAddr()+"/metrics")
	for reason, want := range map[string]int{"missing": 4, "invalid": 1, "role": 2, "no-tenant": 1, "unknown-tenant": 1} {
		if line := fmt.Sprintf(`forever_auth_refused_total{reason=%q} %d`, reason, want); !strings.Contains(metrics, line) {
			t.Errorf("metrics lack %s", line)
		}
	}
}

// TestRevocationCutsAccess: token revoke refuses the credential at once
// and ends its open stream and its NATS connection, the tenant's other credentials still work;
// disable refuses them all (403) until enable, after which they work when
// enable returns; tenant revoke refuses every credential still live; a
// credential past its expiry is refused as expired.
func TestRevocationCutsAccess(t *testing.T) {
	n := startNode(t)
	a := n.create(t, tenancy.CreateRequest{Name: "acme", Cred: "a"})
	b := n.create(t, tenancy.CreateRequest{Name: "acme", Cred: "b", Role: "reader"})
	const status = "/v1/agents/steps:zz/status"
	aNATS := n.connect(t, a.Creds)
	if _, err := aNATS.Request("forever.cmd.steps:zz.status", nil, 20*time.Second); err != nil {
		t.Fatalf("status over NATS with a: %v", err)
	}

	req, err := http.NewRequestWithContext(t.Context(), "GET", "http://"+n.d.HTTPAddr()+"/v1/agents/steps:zz/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("events with a: %v %v", err, resp)
	}
	defer resp.Body.Close()
	ended := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
		}
		ended <- sc.Err()
	}()

	var tr tenancy.TokenRevokeReply
	n.must(t, tenancy.AdminTokenRevokeSubject, tenancy.TokenRevokeRequest{Name: "acme", Cred: "a"}, &tr)
	if !tr.Revoked {
		t.Errorf("token revoke of a live credential: %+v", tr)
	}
	select {
	case <-ended:
	case <-time.After(waitfor.Bound):
		t.Fatal("the stream of a revoked credential stayed open")
	}
	waitfor.True(t, "the server to close a's NATS connection", func() bool { return aNATS.Status() != nats.CONNECTED })
	if code, body, _ := n.get(t, status, a.Token); code != 401 {
		t.Errorf("a revoked credential: %d %s, want 401", code, body)
	}
	if code, body, _ := n.get(t, status, b.Token); code != 200 {
		t.Errorf("another credential after a token revoke: %d %s, want 200", code, body)
	}

	n.must(t, tenancy.AdminDisableSubject, tenancy.RevokeRequest{Name: "acme"}, nil)
	if code, body, _ := n.get(t, status, b.Token); code != 403 || !strings.Contains(body, "disabled") {
		t.Errorf("a disabled tenant's credential: %d %s, want 403 disabled", code, body)
	}
	n.must(t, tenancy.AdminEnableSubject, tenancy.RevokeRequest{Name: "acme"}, nil)
	if code, body, _ := n.get(t, status, b.Token); code != 200 {
		t.Errorf("a credential once its tenant is enabled: %d %s, want 200", code, body)
	}

	var rr tenancy.RevokeReply
	n.must(t, tenancy.AdminRevokeSubject, tenancy.RevokeRequest{Name: "acme"}, &rr)
	if rr.Revoked != 1 {
		t.Errorf("tenant revoke: %+v, want b's one credential revoked", rr)
	}
	if code, body, _ := n.get(t, status, b.Token); code != 401 {
		t.Errorf("a credential after tenant revoke: %d %s, want 401", code, body)
	}

	brief := n.create(t, tenancy.CreateRequest{Name: "acme", Cred: "brief", Expires: "1s"})
	waitfor.NoError(t, func() error {
		if code, body, _ := n.get(t, status, brief.Token); code != 401 || !strings.Contains(body, "expired") {
			return fmt.Errorf("401 expired for a credential past its expiry, have %d %s", code, body)
		}
		return nil
	})
}
