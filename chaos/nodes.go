package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/tenancy"
	"github.com/forever-agents/forever/internal/chartargs"
)

// nodes is the agentd under test: one node with the embedded server, or a
// cluster of them started as the Helm chart starts its pods.
type nodes struct {
	list []*daemon
	// auth is set for a cluster with auth. creds is then its admin
	// credential (a user of agentd's service account), and user the
	// credential of agentd's own user in the tenant the load runs in (with
	// auth, agents live in tenants only): its JWT and seed.
	auth             bool
	creds            string
	userJWT, userKey string
	// tenantConns is the --max-conns of the load's tenant (0: the
	// default).
	tenantConns int
}

// tenant is the tenant the load runs in on a cluster with auth.
const tenant = "chaos"

// singleNode prepares one agentd on loopback with the embedded server and
// no auth, logging to dir/agentd.log, with extra flags after chaos's.
func singleNode(bin, dir string, extra []string) (*nodes, error) {
	addrs, err := freeAddrs(2)
	if err != nil {
		return nil, err
	}
	log, err := os.OpenFile(filepath.Join(dir, "agentd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	d := &daemon{name: "agentd", bin: bin, data: filepath.Join(dir, "data"), httpAddr: addrs[0], natsAddr: addrs[1], log: log}
	d.args = append(append([]string{"--data", d.data, "--http", d.httpAddr, "--nats-listen", d.natsAddr, "--log-format", "json"}, tuning...), extra...)
	d.env = []string{"FOREVER_LOG_LEVEL=info"}
	return &nodes{list: []*daemon{d}}, nil
}

// clusterNodes prepares n agentd nodes on loopback, each started as the
// chart starts a pod with its default values (chartargs.Args and Env):
// clustered embedded servers routed to each other, chartargs.Replicas(n)
// replicas, the chart's partitions and leases of ttl. With withAuth, auth
// is on with one secret file every node shares (the chart's default,
// auth.enabled); without, it is off (auth.enabled false). Node i logs to
// dir/forever-i.log and stores under dir/forever-i. extra flags follow
// the chart's and chaos's own.
func clusterNodes(bin, dir string, n int, ttl time.Duration, withAuth bool, extra []string) (*nodes, error) {
	secret := make([]byte, 32)
	rand.Read(secret)
	secretFile := filepath.Join(dir, "auth-secret")
	if err := os.WriteFile(secretFile, []byte(hex.EncodeToString(secret)), 0o400); err != nil {
		return nil, err
	}
	// Four loopback ports a node: HTTP, NATS, routes, and /metrics, which
	// the chart serves on a port of its own (9464 in a pod; here each node
	// needs its own).
	addrs, err := freeAddrs(4 * n)
	if err != nil {
		return nil, err
	}
	var routes []string
	for i := range n {
		routes = append(routes, "nats://"+addrs[4*i+2])
	}
	ns := &nodes{auth: withAuth}
	if !withAuth {
		secretFile = ""
	}
	for i := range n {
		name := fmt.Sprintf("forever-%d", i)
		log, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			ns.closeLogs()
			return nil, err
		}
		pod := chartargs.Pod{
			Name: name, Data: filepath.Join(dir, name), HTTP: addrs[4*i], NATSListen: addrs[4*i+1],
			Cluster: "forever", ClusterListen: addrs[4*i+2], Routes: routes, MetricsListen: addrs[4*i+3],
			Replicas: chartargs.Replicas(n), Partitions: chartargs.DefaultPartitions, LeaseTTL: ttl,
			AuthSecretFile: secretFile,
		}
		ns.list = append(ns.list, &daemon{
			name: name, bin: bin, data: pod.Data, httpAddr: pod.HTTP, natsAddr: pod.NATSListen, log: log,
			args: append(append(chartargs.Args(pod), tuning...), extra...),
			env:  chartargs.Env(pod),
		})
	}
	return ns, nil
}

// clustered reports whether the nodes form a cluster.
func (ns *nodes) clustered() bool { return len(ns.list) > 1 }

// urls are the nodes' NATS client URLs, joined by commas.
func (ns *nodes) urls() string {
	var out []string
	for _, d := range ns.list {
		out = append(out, "nats://"+d.natsAddr)
	}
	return strings.Join(out, ",")
}

// startAll starts every node at once (a cluster's JetStream needs a
// quorum before any node is ready) and waits until each is ready. With
// auth it then creates the load's tenant with the admin credential node 0
// wrote, as an operator does (agentd tenant create), and takes the
// credential of agentd's user in it (tenancy.AdminAccessSubject), which
// reaches its events as well as its commands and chunks.
func (ns *nodes) startAll(ctx context.Context, dir string) error {
	began := make([]time.Time, len(ns.list))
	for i, d := range ns.list {
		var err error
		if began[i], err = d.spawn(); err != nil {
			return err
		}
	}
	for i, d := range ns.list {
		if _, err := d.waitReady(ctx, began[i]); err != nil {
			return err
		}
	}
	if !ns.auth {
		return nil
	}
	ns.creds = filepath.Join(ns.list[0].data, agentd.AdminCredsFile)
	if _, err := os.Stat(ns.creds); err != nil {
		return fmt.Errorf("the admin credential of %s: %w", ns.list[0].name, err)
	}
	var out []byte
	var err error
	for range 5 {
		args := []string{"tenant", "create", tenant, "--nats-url", ns.urls(), "--creds", ns.creds, "--out", dir}
		if ns.tenantConns > 0 {
			args = append(args, "--max-conns", strconv.Itoa(ns.tenantConns))
		}
		cmd := exec.CommandContext(ctx, ns.list[0].bin, args...)
		if out, err = cmd.CombinedOutput(); err == nil {
			break
		}
		sleep(ctx, 2*time.Second)
	}
	if err != nil {
		return fmt.Errorf("agentd tenant create %s: %v: %s", tenant, err, out)
	}
	nc, err := nats.Connect(ns.urls(), nats.UserCredentials(ns.creds), nats.Name("chaos admin"))
	if err != nil {
		return err
	}
	defer nc.Close()
	body, _ := json.Marshal(tenancy.AccessRequest{Tenants: []string{tenant}})
	for range 5 {
		var msg *nats.Msg
		rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		msg, err = nc.RequestWithContext(rctx, tenancy.AdminAccessSubject, body)
		cancel()
		if err == nil {
			if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
				err = fmt.Errorf("%s %s", code, msg.Header.Get("Nats-Service-Error"))
			}
		}
		if err == nil {
			var reply tenancy.AccessReply
			if err = json.Unmarshal(msg.Data, &reply); err == nil && len(reply.Tenants) == 1 {
				creds := []byte(reply.Tenants[0].Creds)
				if ns.userJWT, err = jwt.ParseDecoratedJWT(creds); err == nil {
					var kp nkeys.KeyPair
					if kp, err = jwt.ParseDecoratedUserNKey(creds); err == nil {
						var seed []byte
						seed, err = kp.Seed()
						ns.userKey = string(seed)
					}
				}
				if err == nil {
					return nil
				}
			}
		}
		sleep(ctx, 2*time.Second)
	}
	return fmt.Errorf("access to tenant %s: %v", tenant, err)
}

// waitAllReady waits until every node answers /readyz with 200.
func (ns *nodes) waitAllReady(ctx context.Context) error {
	for _, d := range ns.list {
		if _, err := d.waitReady(ctx, time.Now()); err != nil {
			return err
		}
	}
	return nil
}

// connect opens a client connection to the nodes. It lists every node,
// preferred first, and finds a stalled (SIGSTOPped) node within seconds by
// its pings, so the client moves to another node instead of waiting on it.
func (ns *nodes) connect(preferred int, name string) (*nats.Conn, error) {
	var urls []string
	for i := range ns.list {
		urls = append(urls, "nats://"+ns.list[(preferred+i)%len(ns.list)].natsAddr)
	}
	opts := []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond),
		nats.PingInterval(time.Second), nats.MaxPingsOutstanding(3), nats.DontRandomize()}
	if ns.auth {
		opts = append(opts, nats.UserJWTAndSeed(ns.userJWT, ns.userKey))
	}
	nc, err := nats.Connect(strings.Join(urls, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", urls[0], err)
	}
	return nc, nil
}

// stopAll stops every node with SIGTERM.
func (ns *nodes) stopAll() error {
	var errs []error
	for _, d := range ns.list {
		errs = append(errs, d.stop())
	}
	return errors.Join(errs...)
}

// killAll kills every node still running.
func (ns *nodes) killAll() {
	for _, d := range ns.list {
		d.kill()
	}
}

func (ns *nodes) closeLogs() {
	for _, d := range ns.list {
		d.log.Close()
	}
}
