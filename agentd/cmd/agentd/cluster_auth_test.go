package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/agentd/quota"
	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/chartargs"
	"github.com/forever-agents/forever/replay"
)

// testClusterAuth runs three nodes with auth as the chart's defaults start
// them (one shared secret file): a tenant created on one node is served by
// every node, over NATS and HTTP, its agents spread over the nodes, a
// revocation sent to one node closes a connection held on another, and a
// node's SIGKILL leaves a tenant's connection limit as it was.
func testClusterAuth(t *testing.T, bin string) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(strings.Repeat("k", 48)), 0o400); err != nil {
		t.Fatal(err)
	}
	nodes := newCluster(t, 3, func(p *chartargs.Pod) { p.AuthSecretFile = secret })
	for _, nd := range nodes {
		nd.start(t, bin)
	}
	waitReady(t, nodes...)
	out := t.TempDir()
	acme := createTenant(t, bin, "nats://"+nodes[0].nats, filepath.Join(nodes[0].data, agentd.AdminCredsFile), out, "acme")

	// Every node runs the tenant and takes its share of its partitions.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) { // not a synchronisation: the interval of a poll on every node owning its share of the tenant
		var owned []int
		for _, nd := range nodes {
			owned = append(owned, tenantPartitions(nd, "acme"))
		}
		if !slices.ContainsFunc(owned, func(n int) bool { return n < 20 }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tenant's partitions never balanced: %v", owned)
		}
	}

	// The tenant's client on node 1: its agents are owned by all three.
	nc, err := nats.Connect("nats://"+nodes[1].nats, nats.UserCredentials(acme.Creds), nats.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	owners := map[string]int{}
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; i < 12; {
		agent := fmt.Sprintf("bot%d", i)
		msg, err := nc.Request("forever.cmd."+agent+".status", nil, 10*time.Second)
		if err == nil && msg.Header.Get("Nats-Service-Error-Code") == "" {
			var st host.Status
			if err := json.Unmarshal(msg.Data, &st); err != nil || st.Owner == "" {
				t.Fatalf("status %s: %v %s", agent, err, msg.Data)
			}
			owners[st.Owner]++
			body, _ := json.Marshal(map[string]string{"text": "hello " + agent})
			if msg, err = nc.Request("forever.cmd."+agent+".chat", body, 30*time.Second); err != nil || msg.Header.Get("Nats-Service-Error-Code") != "" {
				t.Fatalf("chat %s: %v %v", agent, err, msg.Header)
			}
			i++
			continue
		}
		if time.Now().After(deadline) { // 503 while the tenant's leases settle
			t.Fatalf("status %s: %v %v", agent, err, msg.Header)
		}
		time.Sleep(100 * time.Millisecond) // not a synchronisation: the interval of a poll on the agent's status (503 while leases settle)
	}
	if len(owners) != 3 {
		t.Errorf("12 agents of the tenant are owned by %v, want all 3 nodes", owners)
	}
	// Node 2's gateway serves the chat of an agent another node owns.
	for i := range 12 {
		agent := fmt.Sprintf("bot%d", i)
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) { // not a synchronisation: the interval of a poll on the agent's assistant message
			code, body := authedGet(t, "http://"+nodes[2].http+"/v1/chat/"+agent+"/messages", acme.Token)
			if code == 200 && strings.Contains(body, `"role":"assistant"`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s on node 2: %d %s", agent, code, body)
			}
		}
	}
	if code, _ := authedGet(t, "http://"+nodes[1].http+"/v1/chat/bot0/messages", ""); code != 401 {
		t.Fatalf("no token on node 1: %d", code)
	}
	checkTenantShards(t, bin, secret, nodes, nc, 12)

	// Revoked through node 2 (with its own admin.creds): node 1 closes the
	// live connection, every node refuses the token.
	closed := make(chan struct{})
	live, err := nats.Connect("nats://"+nodes[0].nats, nats.UserCredentials(acme.Creds), nats.NoReconnect(),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if _, stderr, code := tenantCLI(t, bin, "revoke", "acme", "--nats-url", "nats://"+nodes[2].nats,
		"--creds", filepath.Join(nodes[2].data, agentd.AdminCredsFile)); code != 0 {
		t.Fatalf("revoke: %s", stderr)
	}
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		t.Fatal("the revoked credential's connection to node 0 is still open")
	}
	for _, nd := range nodes {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) { // not a synchronisation: the interval of a poll on a 401 on every node
			code, _ := authedGet(t, "http://"+nd.http+"/v1/chat/bot0/messages", acme.Token)
			if code == 401 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still takes the revoked token: %d", nd.name, code)
			}
		}
	}
	// A node killed and started again: the last check, as it kills a node.
	t.Run("ConnLimitAfterKill", func(t *testing.T) { testClusterConnLimitAfterKill(t, bin, nodes) })
}

// tenantPartitions returns the partitions of tenant the node owns, from
// its /metrics (0 when it cannot tell).
func tenantPartitions(nd *clusterNode, tenant string) int {
	resp, err := http.Get("http://" + nd.metrics + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	prefix := `forever_ownership_partitions_owned{tenant="` + tenant + `"} `
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// checkTenantShards checks that the log of tenant acme, created on a
// cluster of the default layout, is sharded as the nodes' are: its
// client (nc) binds every chunks shard through agentd's forwarder and
// replays the chats of agents bot0..bot<agents-1>, and is refused a call
// on an events stream; the tenant's usage, summed over the shards, counts
// its agents, and its streams as the streams quota counts them (the log
// as two), within the quota. secret is the nodes' shared auth secret.
func checkTenantShards(t *testing.T, bin, secret string, nodes []*clusterNode, nc *nats.Conn, agents int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lg, err := eventlog.Open(ctx, eventlog.Config{Conn: nc, Bind: true, ChunksOnly: true, APIPrefix: auth.ClientAPIPrefix,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("the tenant's client binds its log: %v", err)
	}
	defer lg.Close()
	if lg.Shards() != agentd.DefaultShards {
		t.Fatalf("the tenant's log has %d shards (%v), want the nodes' %d", lg.Shards(), lg.ChunksStreams(), agentd.DefaultShards)
	}
	rc := replay.NewClient(lg)
	for i := range agents {
		agent := fmt.Sprintf("bot%d", i)
		stream, err := rc.Latest(ctx, agent)
		if err != nil {
			t.Fatalf("the tenant's client: latest stream of %s: %v", agent, err)
		}
		var n int
		var last chunk.Chunk
		for it, err := range rc.Follow(ctx, agent, stream, replay.Cursor{}) {
			if err != nil {
				t.Fatalf("the tenant's client replays %s/%s: %v", agent, stream, err)
			}
			n, last = n+1, it.Chunk
		}
		if n == 0 || !last.Terminal() {
			t.Fatalf("the tenant's client replayed %d chunks of %s/%s, the last %+v: want a whole turn", n, agent, stream, last)
		}
	}
	msg, err := nc.Request(auth.ClientAPIPrefix+".STREAM.INFO."+eventlog.ShardStreamName(eventlog.DefaultEventsStream, 0), nil, 10*time.Second)
	if err != nil || !strings.Contains(string(msg.Data), `"code":403`) {
		t.Fatalf("the tenant's client asked for an events stream's info: %v %s, want 403", err, msgData(msg))
	}

	out, stderr, code := tenantCLIAuth(t, bin, "admin-token", "--auth-secret-file", secret, "--server", "nats://"+nodes[0].nats, "--ttl", "1h")
	if code != 0 {
		t.Fatalf("auth admin-token: exit %d: %s", code, stderr)
	}
	var list struct {
		Tenants []struct {
			Name  string       `json:"name"`
			Quota auth.Quota   `json:"quota"`
			Usage *quota.Usage `json:"usage"`
		} `json:"tenants"`
	}
	status, body := authedGet(t, "http://"+nodes[0].http+"/v1/tenants", strings.TrimSpace(out))
	if err := json.Unmarshal([]byte(body), &list); status != 200 || err != nil || len(list.Tenants) != 1 || list.Tenants[0].Usage == nil {
		t.Fatalf("GET /v1/tenants: %d %v %s", status, err, body)
	}
	u, q := list.Tenants[0].Usage, list.Tenants[0].Quota
	t.Logf("acme's usage with its log in %d shards: %+v (quota: %d streams, %d consumers)", lg.Shards(), *u, q.Streams, q.Consumers)
	if u.Agents != agents || u.Streams < 2 || int64(u.Streams) > q.Streams {
		t.Errorf("acme's usage %+v (quota %d streams): want %d agents, streams within the quota", u, q.Streams, agents)
	}
}

// msgData is m's payload, nil for none.
func msgData(m *nats.Msg) []byte {
	if m == nil {
		return nil
	}
	return m.Data
}
