package tenancy_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/demo"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/agentd/tenancy"
)

// node is a daemon with --auth whose tenants' daemons host the steps
// agent type (over NATS and HTTP), and the admin's connection to it.
type node struct {
	d      *agentd.Daemon
	cfg    agentd.Config
	server *server.Server    // the node's embedded server
	admin  *nats.Conn        // with the admin credential
	deps   chan *agentd.Deps // the first tenant daemon's, once it starts
}

// startNode starts a node that lasts until the test ends.
func startNode(t *testing.T) *node {
	t.Helper()
	return startNodeWith(t, 0, nil, 0)
}

// startNodeWith starts a node with shards stream shards of each kind (0:
// unsharded) whose tenants' new logs take tenantShards' count (nil: the
// node's) and whose tenant moves wait up to moveStop (0: the default) for
// the tenant's nodes to stop, until the test ends.
func startNodeWith(t *testing.T, shards int, tenantShards func() int, moveStop time.Duration) *node {
	t.Helper()
	cfg := agentdtest.Config(t)
	cfg.Auth = true
	cfg.Shards = shards
	cfg.MetricsListen = "127.0.0.1:0"
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n := &node{d: d, cfg: cfg, deps: make(chan *agentd.Deps, 1)}
	if err := d.OnStart(func(_ context.Context, deps *agentd.Deps) error { n.server = deps.Server; return nil }); err != nil {
		t.Fatal(err)
	}
	if tenantShards == nil {
		tenantShards = d.Shards
	}
	err = tenancy.AttachWithTenantShards(d, func(td *agentd.Daemon) error {
		h := host.New(host.Config{})
		if err := h.Register("steps", demo.NewStepsAgent, demo.StepsVerbs...); err != nil {
			return err
		}
		if err := h.Attach(td); err != nil {
			return err
		}
		if err := host.AttachHTTP(td, h, host.HTTPConfig{}); err != nil {
			return err
		}
		return td.OnStart(func(_ context.Context, deps *agentd.Deps) error {
			select {
			case n.deps <- deps:
			default:
			}
			return nil
		})
	}, tenantShards, moveStop)
	if err != nil {
		t.Fatal(err)
	}
	agentdtest.Start(t, d)
	agentdtest.WaitStatus(t, "http://"+d.HTTPAddr()+"/readyz", 200)
	n.admin, err = nats.Connect(d.NATSURL(), nats.UserCredentials(filepath.Join(cfg.DataDir, agentd.AdminCredsFile)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.admin.Close)
	return n
}

// request sends req (JSON, or a string sent as it is) to an admin
// subject and returns the error code of the reply ("" for none) and its
// body.
func (n *node) request(t *testing.T, subject string, req any) (code string, body []byte) {
	t.Helper()
	data, ok := req.(string)
	if !ok {
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		data = string(b)
	}
	m, err := n.admin.Request(subject, []byte(data), 60*time.Second)
	if err != nil {
		t.Fatalf("%s %s: %v", subject, data, err)
	}
	return m.Header.Get("Nats-Service-Error-Code"), m.Data
}

// must sends req to an admin subject and decodes its reply into out; an
// error reply fails the test.
func (n *node) must(t *testing.T, subject string, req, out any) {
	t.Helper()
	code, body := n.request(t, subject, req)
	if code != "" {
		t.Fatalf("%s %v: %s %s", subject, req, code, body)
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("%s reply %s: %v", subject, body, err)
		}
	}
}

// create creates a tenant or mints another credential of it.
func (n *node) create(t *testing.T, req tenancy.CreateRequest) tenancy.CreateReply {
	t.Helper()
	var r tenancy.CreateReply
	n.must(t, tenancy.AdminCreateSubject, req, &r)
	if r.Creds == "" || r.Token == "" {
		t.Fatalf("tenant create %+v: a reply without a credential: %+v", req, r)
	}
	return r
}

// connect connects to the node with creds, until the test ends.
func (n *node) connect(t *testing.T, creds string) *nats.Conn {
	t.Helper()
	f := filepath.Join(t.TempDir(), "user.creds")
	if err := os.WriteFile(f, []byte(creds), 0o600); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(n.d.NATSURL(), nats.UserCredentials(f))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// get sends GET path to the node's front door with token (none when
// empty) and the headers hdr (name, value, ...).
func (n *node) get(t *testing.T, path, token string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	return n.do(t, http.MethodGet, path, token, hdr...)
}

func (n *node) do(t *testing.T, method, path, token string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, "http://"+n.d.HTTPAddr()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), resp.Header
}
