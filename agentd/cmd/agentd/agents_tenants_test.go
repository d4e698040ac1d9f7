package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agents"
)

// testTenantAgents (part of TestBinary/Tenants): a tenant's client creds
// list its own agents (forever.list) and follow broadcasts
// (forever.bcast.>), as its HTTP token lists them (GET /v1/agents); the
// server refuses it the delete verb, which the admin sends with agentd
// delete --tenant.
func testTenantAgents(t *testing.T, bin, natsURL, httpAddr, admin string, acme, beta tenantCred) {
	t.Helper()
	violations := make(chan error, 16)
	nc, err := nats.Connect(natsURL, nats.UserCredentials(acme.Creds),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	m, err := nc.Request("forever.cmd.acme-only.meta", []byte(`{"user":"ann"}`), 30*time.Second)
	if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
		t.Fatalf("meta: %v %s", err, m.Data)
	}
	list := func() []string {
		m, err := nc.Request("forever.list", []byte(`{"limit":1000}`), 30*time.Second)
		if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
			t.Fatalf("forever.list as a tenant: %v %s", err, m.Data)
		}
		var p agents.Page
		if err := json.Unmarshal(m.Data, &p); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range p.Agents {
			ids = append(ids, e.Agent)
		}
		return ids
	}
	if ids := list(); !strings.Contains(strings.Join(ids, " "), "acme-only") {
		t.Fatalf("acme lists %v", ids)
	}
	if code, body := authedGet(t, "http://"+httpAddr+"/v1/agents", acme.Token); code != 200 || !strings.Contains(body, `"acme-only"`) {
		t.Fatalf("GET /v1/agents as acme: %d %s", code, body)
	}
	if code, body := authedGet(t, "http://"+httpAddr+"/v1/agents", beta.Token); code != 200 || strings.Contains(body, `"acme-only"`) {
		t.Fatalf("GET /v1/agents as beta: %d %s", code, body)
	}
	if _, err := nc.SubscribeSync("forever.bcast.acme-only"); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	_, err = nc.Request("forever.cmd.acme-only.delete", nil, 2*time.Second)
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
		select {
		case err = <-violations:
		case <-time.After(5 * time.Second):
		}
	}
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "permissions violation") || !strings.Contains(err.Error(), "delete") {
		t.Fatalf("a tenant's delete: not refused (%v)", err)
	}
	select {
	case err := <-violations:
		t.Fatalf("a tenant's subscription to broadcasts refused: %v", err)
	default:
	}
	if ids := list(); !strings.Contains(strings.Join(ids, " "), "acme-only") {
		t.Fatalf("the refused delete deleted: %v", ids)
	}

	cmd := exec.Command(bin, "delete", "acme-only", "--tenant", "acme", "--nats-url", natsURL, "--creds", admin)
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) || err != nil || !strings.Contains(string(out), "acme-only: deleted") {
		t.Fatalf("agentd delete --tenant acme: %v %s", err, out)
	}
	if ids := list(); strings.Contains(strings.Join(ids, " "), "acme-only") {
		t.Fatalf("acme still lists %v", ids)
	}
}
