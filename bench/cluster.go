package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/internal/chartargs"
)

// agentdCluster is a cluster of real agentd processes on loopback, each
// started as the Helm chart starts a pod: the flags and FOREVER_*
// environment of internal/chartargs (R3, the chart's partitions), with
// loopback addresses and the node's own data dir. Nodes are killed and
// restarted one at a time, on the same data dir and addresses.
type agentdCluster struct {
	bin   string
	dir   string
	ttl   time.Duration
	nodes []*clusterNode
	// extra are flags appended to every node's chart flags.
	extra []string
	// started, when set, is called with each node right after its process
	// started (scale-out puts it in its cgroup); an error stops the start.
	started func(nd *clusterNode) error
}

// clusterNode is one agentd of an agentdCluster.
type clusterNode struct {
	name      string
	bin       string
	httpAddr  string
	natsAddr  string
	metrics   string // --metrics-listen
	args, env []string
	logPath   string // every run's output, appended

	cmd    *exec.Cmd
	exited chan error
	log    *os.File
}

// clusterStartAttempts bounds how often startAgentdCluster starts over on
// new ports when a node could not bind the one it was given.
const clusterStartAttempts = 3

// startAgentdCluster starts n nodes storing under dir with lease TTL ttl
// and waits (up to timeout) until every node answers /readyz 200 and the
// partitions are balanced. A port picked free may be taken by the time a
// node binds it (an outgoing connection's ephemeral port): the cluster
// then starts over on new ports and fresh data dirs.
func startAgentdCluster(ctx context.Context, bin, dir string, n int, ttl, timeout time.Duration) (*agentdCluster, error) {
	return (&agentdCluster{bin: bin, dir: dir, ttl: ttl}).start(ctx, n, timeout)
}

// start lays out and starts n nodes of c as startAgentdCluster does, with
// c's extra flags and started hook.
func (c *agentdCluster) start(ctx context.Context, n int, timeout time.Duration) (*agentdCluster, error) {
	for attempt := 1; ; attempt++ {
		if err := c.layout(n); err != nil {
			return nil, err
		}
		for _, nd := range c.nodes {
			if err := c.startNode(nd); err != nil {
				c.close()
				return nil, err
			}
		}
		err := c.waitHealthy(ctx, timeout)
		if err == nil {
			return c, nil
		}
		lost := c.portTaken()
		c.close()
		if lost == nil || attempt == clusterStartAttempts {
			return nil, err
		}
	}
}

// startNode starts nd's process and calls c's started hook with it: every
// start of a node, the first and each restart, goes through it, so a
// restarted node is back in its cgroup.
func (c *agentdCluster) startNode(nd *clusterNode) error {
	if err := nd.start(); err != nil {
		return err
	}
	if c.started != nil {
		return c.started(nd)
	}
	return nil
}

// layout picks fresh addresses and empty data dirs for n nodes named
// forever-0 ... forever-<n-1>.
func (c *agentdCluster) layout(n int) error {
	c.nodes = make([]*clusterNode, n)
	var routes []string
	routeAddrs := make([]string, n)
	for i := range c.nodes {
		nd := &clusterNode{name: fmt.Sprintf("forever-%d", i), bin: c.bin}
		var err error
		if nd.httpAddr, err = freeAddr(); err != nil {
			return err
		}
		if nd.metrics, err = freeAddr(); err != nil {
			return err
		}
		if nd.natsAddr, err = freeAddr(); err != nil {
			return err
		}
		if routeAddrs[i], err = freeAddr(); err != nil {
			return err
		}
		routes = append(routes, "nats://"+routeAddrs[i])
		c.nodes[i] = nd
	}
	for i, nd := range c.nodes {
		ndDir := filepath.Join(c.dir, nd.name)
		if err := os.RemoveAll(ndDir); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		if err := os.MkdirAll(ndDir, 0o755); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		pod := chartargs.Pod{
			Name: nd.name, Data: filepath.Join(ndDir, "data"), HTTP: nd.httpAddr, MetricsListen: nd.metrics, NATSListen: nd.natsAddr,
			Cluster: "forever", ClusterListen: routeAddrs[i], Routes: routes,
			Replicas: chartargs.Replicas(n), LeaseTTL: c.ttl,
		}
		nd.args = append(chartargs.Args(pod), c.extra...)
		nd.env = append(agentdEnv(), chartargs.Env(pod)...)
		nd.logPath = filepath.Join(ndDir, "agentd.log")
	}
	return nil
}

// node returns the node named name, nil if there is none.
func (c *agentdCluster) node(name string) *clusterNode {
	for _, nd := range c.nodes {
		if nd.name == name {
			return nd
		}
	}
	return nil
}

// natsURLs returns the client URLs of every node, comma-separated.
func (c *agentdCluster) natsURLs() string {
	var urls []string
	for _, nd := range c.nodes {
		urls = append(urls, "nats://"+nd.natsAddr)
	}
	return strings.Join(urls, ",")
}

// waitHealthy waits until every node answers /readyz 200 (its views caught
// up, its first leases taken and, since it is clustered, every JetStream
// replica it holds current) and the partitions are balanced: each node
// owns at least what the others leave when they hold the most they may,
// ceil(P/N). It gives up after timeout, or at once when a node exited,
// with what each node last answered and the tail of its log: a cluster
// that lost quorum never gets there.
func (c *agentdCluster) waitHealthy(ctx context.Context, timeout time.Duration) error {
	n := len(c.nodes)
	limit := (chartargs.DefaultPartitions + n - 1) / n
	share := chartargs.DefaultPartitions - (n-1)*limit
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		healthy := true
		var states []string
		for _, nd := range c.nodes {
			if err := nd.exitErr(); err != nil {
				return fmt.Errorf("bench: %s exited: %v\n%s", nd.name, err, nd.tail())
			}
			h, ok := nd.readyz(client)
			states = append(states, fmt.Sprintf("%s: %s", nd.name, h))
			if !ok || h.Partitions < share {
				healthy = false
			}
		}
		if healthy {
			return nil
		}
		if time.Now().After(deadline) {
			var tails []string
			for _, nd := range c.nodes {
				tails = append(tails, nd.tail())
			}
			return fmt.Errorf("bench: cluster not ready and balanced after %s (quorum lost?): %s\n%s",
				timeout, strings.Join(states, "; "), strings.Join(tails, "\n"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// portTaken returns a node that exited because one of its ports was in use.
func (c *agentdCluster) portTaken() *clusterNode {
	for _, nd := range c.nodes {
		if nd.exitErr() != nil {
			if b, err := os.ReadFile(nd.logPath); err == nil && bytes.Contains(b, []byte("in use")) {
				return nd
			}
		}
	}
	return nil
}

// close kills every node still running.
func (c *agentdCluster) close() {
	for _, nd := range c.nodes {
		nd.kill()
	}
}

// readyzBody is what /readyz answers, in part.
type readyzBody struct {
	Status     string `json:"status"`
	JetStream  string `json:"jetstream"`
	Partitions int    `json:"partitions"`
	code       int
	err        error
}

func (h readyzBody) String() string {
	if h.err != nil {
		return h.err.Error()
	}
	return fmt.Sprintf("%d %s, jetstream %q, %d partitions", h.code, h.Status, h.JetStream, h.Partitions)
}

// readyz asks the node's /readyz; ok is a 200.
func (nd *clusterNode) readyz(client *http.Client) (readyzBody, bool) {
	resp, err := client.Get("http://" + nd.httpAddr + "/readyz")
	if err != nil {
		return readyzBody{err: err}, false
	}
	defer resp.Body.Close()
	h := readyzBody{code: resp.StatusCode}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		h.err = fmt.Errorf("readyz %d: %w", resp.StatusCode, err)
	}
	return h, resp.StatusCode == http.StatusOK
}

// start starts the node's process without waiting for it; see
// agentdCluster.waitHealthy.
func (nd *clusterNode) start() error {
	if nd.cmd != nil {
		return errors.New("bench: " + nd.name + " already running")
	}
	log, err := os.OpenFile(nd.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	fmt.Fprintf(log, "--- bench: start %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(nd.bin, nd.args...)
	cmd.Env = nd.env
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("bench: start %s: %w", nd.name, err)
	}
	nd.cmd, nd.exited, nd.log = cmd, make(chan error, 1), log
	go func() { nd.exited <- cmd.Wait() }()
	return nil
}

// exitErr returns why the node's process ended, or nil while it runs (and
// when it was never started or was killed by kill).
func (nd *clusterNode) exitErr() error {
	if nd.cmd == nil {
		return nil
	}
	select {
	case err := <-nd.exited:
		nd.exited <- err
		if err == nil {
			err = errors.New("exit status 0")
		}
		return err
	default:
		return nil
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (nd *clusterNode) kill() {
	if nd.cmd == nil {
		return
	}
	nd.cmd.Process.Signal(syscall.SIGKILL)
	<-nd.exited
	nd.cmd = nil
	nd.log.Close()
}

// dumpStacks makes a node that is stuck write every goroutine's stack to
// its log (SIGQUIT: the Go runtime's dump, after which the process exits)
// and waits, up to 10 s, for it to go; then it is killed as by kill.
func (nd *clusterNode) dumpStacks() {
	if nd.cmd == nil {
		return
	}
	nd.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-nd.exited:
		nd.cmd = nil
		nd.log.Close()
	case <-time.After(10 * time.Second):
		nd.kill()
	}
}

// tail returns the last lines of the node's log, for errors.
func (nd *clusterNode) tail() string {
	b, err := os.ReadFile(nd.logPath)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	lines = lines[max(0, len(lines)-15):]
	return nd.name + " log " + nd.logPath + ":\n" + string(bytes.Join(lines, []byte("\n")))
}

// keepLogs copies the log of every node of the cluster stored under dir
// into a new dir under into, which outlives the run, and returns err
// naming it.
func keepLogs(err error, dir, into string) error {
	logs, _ := filepath.Glob(filepath.Join(dir, "*", "agentd.log"))
	if len(logs) == 0 {
		return err
	}
	kept, kerr := os.MkdirTemp(into, "forever-cluster-logs-")
	if kerr != nil {
		return err
	}
	for _, l := range logs {
		b, rerr := os.ReadFile(l)
		if rerr != nil {
			continue
		}
		os.WriteFile(filepath.Join(kept, filepath.Base(filepath.Dir(l))+".log"), b, 0o644)
	}
	return fmt.Errorf("%w\nnode logs kept in %s", err, kept)
}

// chartCluster is the cluster of the failover and handoff scenarios:
// failoverNodes nodes started as the chart starts its pods, with
// -lease-ttl (else the chart's) and -agentd-flags, under a temp dir of
// the run, and a client connection to every node.
type chartCluster struct {
	*agentdCluster
	nc  *nats.Conn
	ttl time.Duration
}

// startChartCluster starts a chartCluster and waits until it is healthy.
func startChartCluster(ctx context.Context, env *Env) (_ *chartCluster, err error) {
	bin, err := env.AgentdBinary(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := env.TempDir()
	if err != nil {
		return nil, err
	}
	ttl := chartargs.DefaultLeaseTTL
	if env.cfg.LeaseTTL > 0 {
		ttl = env.cfg.LeaseTTL
	}
	cc := &chartCluster{agentdCluster: &agentdCluster{bin: bin, dir: dir, ttl: ttl, extra: env.cfg.AgentdFlags}, ttl: ttl}
	if _, err := cc.start(ctx, failoverNodes, failoverHealthy); err != nil {
		cc.close(env, &err)
		return nil, err
	}
	cc.nc, err = nats.Connect(cc.natsURLs(), nats.Name("bench"), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond), nats.PingInterval(time.Second), nats.MaxPingsOutstanding(3))
	if err != nil {
		err = fmt.Errorf("bench: connect to the cluster: %w", err)
		cc.close(env, &err)
		return nil, err
	}
	return cc, nil
}

// close ends the cluster and removes its dir; when *err is set (the run
// failed), it keeps the nodes' logs under -dir first and says where in
// *err.
func (cc *chartCluster) close(env *Env, err *error) {
	if cc.nc != nil {
		cc.nc.Close()
	}
	cc.agentdCluster.close()
	if *err != nil {
		*err = keepLogs(*err, cc.dir, env.cfg.Dir)
	}
	os.RemoveAll(cc.dir)
}
