package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/internal/chartargs"
)

// Scale-out scenario parameters, before -n scales them.
const (
	scaleOutQuota  = 0.25 // CPUs per node (-cpu-quota)
	scaleOutAgents = 400  // agents chatting in a closed loop
	scaleOutWindow = 30 * time.Second
	scaleOutWarmup = 10 * time.Second
	// scaleOutIdle is the window, before -n scales it (at least 10 s), in which each
	// cluster's idle CPU is read: started, balanced, no chat yet.
	scaleOutIdle    = 10 * time.Second
	scaleOutHealthy = 5 * time.Minute
	// scaleOutGoal is issue 36's goal: 6 nodes at least this many times
	// the turns/s of 3.
	scaleOutGoal = 1.8
	// scaleOutHot bounds a node's events applied/s and CPU over the mean
	// of its cluster: no hot node.
	scaleOutHot = 1.5
	// cpuCgroupRoot is where cgroup v1's cpu controller is mounted.
	cpuCgroupRoot = "/sys/fs/cgroup/cpu"
	cfsPeriodUS   = 100_000
	// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times
	// (100 on every Linux this runs on).
	clockTicks = 100
)

// scaleOut is issue 36's scale model: does a cluster do more work with
// more nodes? It starts a cluster of 3 real agentd processes, then one of
// 6, each node started as the chart starts its pods (internal/chartargs,
// as the failover scenario does), plus --local-rate=-1 (the local model
// answers at once: the model is not what is measured) and -agentd-flags.
// Each node's process is put in a cgroup v1 cpu cgroup of its own,
// forever-bench-<run>-<node>, with the same cpu.cfs_quota_us (-cpu-quota
// CPUs, 0.25 by default), right after it starts; the cgroups are removed
// at the end. Where cgroup v1's cpu controller is not writable (not
// mounted, not root, cgroup v2 only) the scenario prints why and returns
// one SKIP row.
//
// On each cluster, scaleOutAgents agents (times -n) chat in a closed loop:
// each agent's goroutine POSTs /v1/chat (through node i mod N's gateway,
// as a Service spreads clients) and reads the answer to data: [DONE], then
// sends the next. After a warm-up, it counts the turns completed in the
// window and reads each node's /metrics and /proc/<pid>/stat at its start
// and end. Rows:
//
//   - turns/s of 6 nodes next to 3 nodes, goal >= 1.8x;
//   - CPU per turn summed over the nodes, 6 next to 3;
//   - per turn, 6 next to 3: JetStream consumers created, events applied,
//     posts answered 409 (the agent's last turn still active: the post
//     goes again 2 ms later), and the live follows' idle reads of the log
//     (a follow that waited replay's livePoll, 5 s, for a live chunk);
//   - per node of each cluster: events applied per second (the advance of
//     forever_eventlog_projection_cursor{projection="runs"}, a stream
//     sequence: every event of the events stream the node's views went
//     through; the window starts once every node publishes it) and CPU
//     used (utime+stime), each next to its cluster's mean, within 1.5x
//     (no hot node).
//
// The bench process itself, which drives the load, is in no cgroup: on a
// machine with fewer free cores than the nodes' quotas add up to, the
// nodes get less than their quota and the ratio says less.
func scaleOut(ctx context.Context, env *Env) (Result, error) {
	if env.cfg.CPUQuota < 0 {
		return Result{Rows: []Row{{Figure: "SKIP: -cpu-quota below 0", Baseline: "a quota per node"}}}, nil
	}
	if why := cpuCgroupsUnusable(); why != "" {
		env.Logger.Warn("scale-out: skipped", "why", why)
		return Result{Rows: []Row{{Figure: "SKIP: " + why, Baseline: "cgroup v1 cpu controller writable at " + cpuCgroupRoot}}}, nil
	}
	quota := env.cfg.CPUQuota
	if quota <= 0 {
		quota = scaleOutQuota
	}
	bin, err := env.AgentdBinary(ctx)
	if err != nil {
		return Result{}, err
	}
	agents := env.Count(scaleOutAgents, scaleOutAgents)
	warm := max(3*time.Second, time.Duration(float64(scaleOutWarmup)*env.cfg.Scale))
	window := max(5*time.Second, time.Duration(float64(scaleOutWindow)*env.cfg.Scale))
	idle := max(10*time.Second, time.Duration(float64(scaleOutIdle)*env.cfg.Scale))
	var runs []scaleOutRun
	for _, n := range []int{3, 6} {
		r, err := scaleOutCluster(ctx, env, bin, n, quota, agents, scaleOutTimes{warm: warm, window: window, idle: idle})
		if err != nil {
			return Result{}, fmt.Errorf("%d nodes: %w", n, err)
		}
		env.Logger.Info("scale-out", "nodes", n, "turns/s", r.turnsPerSec(), "failed", r.failed, "load", r.load)
		runs = append(runs, r)
	}
	r3, r6 := runs[0], runs[1]
	q := fmt.Sprintf("%g CPU/node, %d agents, %s", quota, agents, window)
	rows := []Row{
		{Figure: fmt.Sprintf("turns/s, 6 nodes (%s; load %s; %d failed)", q, r6.load, r6.failed), Value: r6.turnsPerSec(),
			Baseline: fmt.Sprintf("turns/s, 3 nodes (load %s; %d failed)", r3.load, r3.failed), BaselineValue: r3.turnsPerSec(),
			Target: scaleOutGoal, TargetNote: "6 nodes >= 1.8x 3 nodes"},
		{Figure: "ms CPU per turn, summed over 6 nodes", Value: r6.cpuPerTurn(), LowerIsBetter: true,
			Baseline: "summed over 3 nodes", BaselineValue: r3.cpuPerTurn()},
		{Figure: "idle CPU % of a core, summed over 6 nodes (no chat)", Value: r6.idleCPU * 100, LowerIsBetter: true,
			Baseline: "summed over 3 nodes", BaselineValue: r3.idleCPU * 100},
		{Figure: "JetStream consumers created per turn, 6 nodes", Value: r6.consumersPerTurn(), LowerIsBetter: true,
			Baseline: "3 nodes", BaselineValue: r3.consumersPerTurn()},
		{Figure: "events applied per turn of the cluster, mean of 6 nodes", Value: r6.eventsPerTurn(), LowerIsBetter: true,
			Baseline: "mean of 3 nodes", BaselineValue: r3.eventsPerTurn()},
		{Figure: "posts answered 409 (the agent's turn still active) per turn, 6 nodes", Value: r6.perTurn(float64(r6.busy)), LowerIsBetter: true,
			Baseline: "3 nodes", BaselineValue: r3.perTurn(float64(r3.busy))},
		{Figure: "live follows' idle reads of the log per turn, 6 nodes", Value: r6.perTurn(r6.idleReads), LowerIsBetter: true,
			Baseline: "3 nodes", BaselineValue: r3.perTurn(r3.idleReads)},
	}
	for _, r := range runs {
		rows = append(rows, r.nodeRows()...)
	}
	return Result{Rows: rows}, nil
}

// scaleOutRun is what one cluster did in the window.
type scaleOutRun struct {
	nodes  int
	turns  int64
	failed int64 // turns that ended in an error other than a busy agent
	window time.Duration
	names  []string
	events []float64 // per node: events applied per second
	cpu    []float64 // per node: CPUs used (1 = one core)
	load   string    // /proc/loadavg's 1-minute figure, at the start and end
	// idleCPU is the CPUs the nodes used together, started and balanced,
	// before any chat.
	idleCPU float64
	// consumers is the JetStream consumers created in the window (-1:
	// not counted).
	consumers int64
	// busy is the posts answered 409 in the window: the agent's last
	// turn still held it, and the post went again 2 ms later.
	busy int64
	// idleReads is the nodes' live follows' reads of the log after
	// replay's livePoll without a live chunk, in the window
	// (forever_replay_live_reads_total{why="idle"}).
	idleReads float64
}

// perTurn is x over the window's turns.
func (r scaleOutRun) perTurn(x float64) float64 {
	if r.turns == 0 {
		return 0
	}
	return x / float64(r.turns)
}

// consumersPerTurn is consumers over turns (-1: not counted).
func (r scaleOutRun) consumersPerTurn() float64 {
	if r.consumers < 0 || r.turns == 0 {
		return -1
	}
	return r.perTurn(float64(r.consumers))
}

// scaleOutTimes are a cluster's warm-up, its measured window, and its
// idle window before the load.
type scaleOutTimes struct{ warm, window, idle time.Duration }

func (r scaleOutRun) turnsPerSec() float64 { return float64(r.turns) / r.window.Seconds() }

// cpuPerTurn is the CPU of every node in the window over its turns, in ms.
func (r scaleOutRun) cpuPerTurn() float64 {
	if r.turns == 0 {
		return 0
	}
	var sum float64
	for _, c := range r.cpu {
		sum += c
	}
	return sum * r.window.Seconds() * 1000 / float64(r.turns)
}

// eventsPerTurn is the events a node's views applied, the mean of the
// nodes, for each turn the cluster completed: about 6 when every node
// applies every event, about 6/n when each applies its own partitions'.
func (r scaleOutRun) eventsPerTurn() float64 {
	if r.turns == 0 || len(r.events) == 0 {
		return 0
	}
	var sum float64
	for _, e := range r.events {
		sum += e
	}
	return sum / float64(len(r.events)) * r.window.Seconds() / float64(r.turns)
}

// nodeRows are each node's events applied/s and CPU next to the mean of
// its cluster, within scaleOutHot.
func (r scaleOutRun) nodeRows() []Row {
	var rows []Row
	for _, m := range []struct {
		what string
		v    []float64
	}{{"events applied/s", r.events}, {"CPU % of a core", r.cpu}} {
		mean := 0.0
		for _, x := range m.v {
			mean += x
		}
		mean /= float64(len(m.v))
		scale := 1.0
		if m.what != "events applied/s" {
			scale = 100
		}
		for i, x := range m.v {
			rows = append(rows, Row{
				Figure: fmt.Sprintf("%s, %s of %d nodes", m.what, r.names[i], r.nodes), Value: x * scale, LowerIsBetter: true,
				Baseline: fmt.Sprintf("mean of the %d nodes", r.nodes), BaselineValue: mean * scale,
				Target: 1 / scaleOutHot, TargetNote: "within 1.5x of the mean",
			})
		}
	}
	return rows
}

// scaleOutCluster starts n nodes in cgroups of quota CPUs each, drives
// agents chats until warm and then for window, and stops them.
func scaleOutCluster(ctx context.Context, env *Env, bin string, n int, quota float64, agents int, times scaleOutTimes) (_ scaleOutRun, err error) {
	warm, window := times.warm, times.window
	dir, err := env.TempDir()
	if err != nil {
		return scaleOutRun{}, err
	}
	defer os.RemoveAll(dir)
	defer func() {
		if err != nil {
			err = keepLogs(err, dir, env.cfg.Dir)
		}
	}()
	cg := newCPUCgroups(quota)
	defer func() { err = errors.Join(err, cg.remove()) }()
	c := &agentdCluster{bin: bin, dir: dir, ttl: chartargs.DefaultLeaseTTL,
		extra:   append(profileFlags(env.cfg.NodeProfiles), env.cfg.AgentdFlags...),
		started: func(nd *clusterNode) error { return cg.add(nd.name, nd.cmd.Process.Pid) }}
	started := time.Now()
	if _, err := c.start(ctx, n, scaleOutHealthy); err != nil {
		return scaleOutRun{}, err
	}
	defer c.close()
	if err := waitLeadersSpread(ctx, c, started, scaleOutSpreadWait); err != nil {
		env.Logger.Warn("scale-out: the shard streams' leaders were not spread; measuring anyway", "nodes", n, "err", err)
	}
	r := scaleOutRun{nodes: n}
	// The idle window: what the cluster costs with nothing to do (Raft
	// heartbeats, lease renewals, consumers), read before any chat.
	idle0, err := nodeSnapshots(c)
	if err != nil {
		return scaleOutRun{}, err
	}
	waitIdle, err := startProfiles(env.cfg.NodeProfiles, "idle-", c, times.idle)
	if err != nil {
		return scaleOutRun{}, err
	}
	ti := time.Now()
	if err := sleepCtx(ctx, times.idle); err != nil {
		return scaleOutRun{}, errors.Join(err, waitIdle())
	}
	if err := waitIdle(); err != nil {
		env.Logger.Warn("scale-out: profiles", "err", err)
	}
	idle1, err := nodeSnapshots(c)
	if err != nil {
		return scaleOutRun{}, err
	}
	for i := range idle1 {
		r.idleCPU += float64(idle1[i].ticks-idle0[i].ticks) / clockTicks / time.Since(ti).Seconds()
	}

	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: agents, MaxIdleConns: agents}}
	defer hc.CloseIdleConnections()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var done, failed, resumed, busy atomic.Int64
	var lastErr atomic.Value
	fails := &failTally{}
	var wg sync.WaitGroup
	for i := range agents {
		base := "http://" + c.nodes[i%n].httpAddr
		agent := fmt.Sprintf("scale-%d", i)
		wg.Go(func() {
			for k := 0; lctx.Err() == nil; k++ {
				n, err := postTurnResuming(lctx, hc, base, agent, k)
				resumed.Add(int64(n))
				switch {
				case err == nil:
					done.Add(1)
				case lctx.Err() != nil:
				case errors.Is(err, errTurnActive):
					busy.Add(1)
					time.Sleep(2 * time.Millisecond)
				default:
					failed.Add(1)
					lastErr.Store(err.Error())
					fails.add(err)
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
	}
	defer wg.Wait()
	defer cancel()
	if err := sleepCtx(ctx, warm); err != nil {
		return scaleOutRun{}, err
	}
	// The window starts once every node's views have applied an event
	// since it started: a node publishes its runs cursor only then.
	var before []nodeSnapshot
	for deadline := time.Now().Add(time.Minute); ; {
		if before, err = nodeSnapshots(c); err != nil {
			return scaleOutRun{}, err
		}
		if everyHasRuns(before) || time.Now().After(deadline) {
			break
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return scaleOutRun{}, err
		}
	}
	load0 := loadAvg()
	waitProfiles, err := startProfiles(env.cfg.NodeProfiles, "", c, window)
	if err != nil {
		return scaleOutRun{}, err
	}
	// The JetStream consumers created in the window (their advisories,
	// as the server publishes them): each is a meta-group proposal every
	// server stores, and one more to delete it.
	var consumers atomic.Int64
	if nc, err := nats.Connect("nats://"+c.nodes[0].natsAddr, nats.Name("bench")); err != nil {
		env.Logger.Warn("scale-out: no count of consumers created", "err", err)
		r.consumers = -1
	} else {
		defer nc.Close()
		if _, err := nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.CREATED.>", func(*nats.Msg) { consumers.Add(1) }); err != nil || nc.Flush() != nil {
			r.consumers = -1
		}
	}
	t0, d0, f0, b0 := time.Now(), done.Load(), failed.Load(), busy.Load()
	c0 := consumers.Load()
	if err := sleepCtx(ctx, window); err != nil {
		return scaleOutRun{}, errors.Join(err, waitProfiles())
	}
	if r.consumers == 0 {
		r.consumers = consumers.Load() - c0
	}
	after, err := nodeSnapshots(c)
	if err != nil {
		return scaleOutRun{}, err
	}
	r.window, r.turns, r.failed, r.busy = time.Since(t0), done.Load()-d0, failed.Load()-f0, busy.Load()-b0
	if err := waitProfiles(); err != nil {
		env.Logger.Warn("scale-out: profiles", "err", err)
	}
	r.load = load0 + "-" + loadAvg()
	if r.failed > 0 {
		env.Logger.Warn("scale-out: turns failed", "nodes", n, "failed", r.failed, "kinds", fails.String(), "last", lastErr.Load())
	}
	if k := resumed.Load(); k > 0 {
		// Not failures: the gateway cut the stream (its follow failed past
		// its retries: the node logs say "sse follow") and the bench
		// resumed it, as clients do.
		env.Logger.Info("scale-out: streams cut short and resumed", "nodes", n, "resumes", k)
	}
	if env.cfg.NodeProfiles != "" {
		// The nodes' logs beside their profiles: why a turn failed is there.
		for _, nd := range c.nodes {
			if b, err := os.ReadFile(nd.logPath); err == nil {
				_ = os.WriteFile(filepath.Join(env.cfg.NodeProfiles, fmt.Sprintf("%dnodes-%s.log", n, nd.name)), b, 0o644)
			}
		}
	}
	if r.failed > r.turns {
		return scaleOutRun{}, fmt.Errorf("bench: %d turns failed, %d completed; the last: %v", r.failed, r.turns, lastErr.Load())
	}
	for i, nd := range c.nodes {
		env.Logger.Info("scale-out: node", "nodes", n, "node", nd.name, "runs cursor before", before[i].cursors["runs"],
			"lag before", before[i].cursors["lag:runs"], "after", after[i].cursors["runs"], "lag after", after[i].cursors["lag:runs"], "cpu ticks", after[i].ticks-before[i].ticks)
		r.names = append(r.names, nd.name)
		r.events = append(r.events, after[i].applied(before[i])/r.window.Seconds())
		r.cpu = append(r.cpu, float64(after[i].ticks-before[i].ticks)/clockTicks/r.window.Seconds())
		r.idleReads += after[i].cursors["live:idle"] - before[i].cursors["live:idle"]
	}
	return r, nil
}

// failTally counts a cluster's failed turns by kind (the status a post
// was answered, or a stream cut short), since the warm-up began.
type failTally struct {
	mu sync.Mutex
	n  map[string]int
}

func (f *failTally) add(err error) {
	kind := "other"
	msg := err.Error()
	switch {
	case strings.Contains(msg, "without [DONE]"):
		kind = "stream ended without [DONE]"
	case strings.Contains(msg, ": 503 "):
		kind = "503"
	case strings.Contains(msg, ": 504 "):
		kind = "504"
	case strings.Contains(msg, ": 429 "):
		kind = "429"
	case strings.Contains(msg, ": 500 "):
		kind = "500"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n = map[string]int{}
	}
	f.n[kind]++
}

// String is "kind: count" for each kind, in order of kind.
func (f *failTally) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	kinds := make([]string, 0, len(f.n))
	for k := range f.n {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	var b strings.Builder
	for i, k := range kinds {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %d", k, f.n[k])
	}
	return b.String()
}

// scaleOutSpreadWait bounds how long a cluster's start waits for its
// shard streams' leaders to be spread, and scaleOutFirstSpread is when
// agentd spreads them first: 30 s after each node started (its
// leaderSpreadEvery), plus a margin for the stepdowns to finish.
const (
	scaleOutSpreadWait  = 90 * time.Second
	scaleOutFirstSpread = 70 * time.Second
	// scaleOutSpreadQuiet is how long after a node last logged a
	// stepdown of the spread the leaders count as spread.
	scaleOutSpreadQuiet = 5 * time.Second
)

// spreadLogged is the message agentd logs for each stepdown of the spread.
const spreadLogged = "stream leader asked to step down for its share of the servers"

// lastSpreadLogged returns when a node of c last logged a stepdown of the
// leaders' spread (zero if none has).
func lastSpreadLogged(c *agentdCluster) time.Time {
	var last time.Time
	for _, nd := range c.nodes {
		b, err := os.ReadFile(nd.logPath)
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			if !strings.Contains(line, spreadLogged) {
				continue
			}
			var l struct {
				Time time.Time `json:"time"`
			}
			if json.Unmarshal([]byte(line), &l) == nil && l.Time.After(last) {
				last = l.Time
			}
		}
	}
	return last
}

// waitLeadersSpread waits, up to timeout, until the Raft leaders of the
// cluster's shard streams are spread over its nodes as agentd spreads them
// (the owner of partition 0, every 30 s: eventlog.Log.SpreadLeaders):
// until agentd's first spread is done (a node logged its stepdowns, the
// last scaleOutSpreadQuiet ago, or none did by scaleOutFirstSpread after
// the nodes started: a spread moves leaders that are balanced already to
// the servers it wants, which the bench does not compute), and every node
// leads some and no node leads more than 2 more than another, as GET
// /v1/cluster on the first node shows them. Before that, the
// stepdowns that spread them would fall in the measured window, each a
// leader election under load (writes refused for its moment), and the
// leaders bunched on a few nodes until then. An unsharded cluster has
// nothing to spread: it returns at once.
func waitLeadersSpread(ctx context.Context, c *agentdCluster, started time.Time, timeout time.Duration) error {
	client := &http.Client{Timeout: 5 * time.Second}
	var last string
	for deadline := time.Now().Add(timeout); ; {
		spread, what, err := leadersSpread(client, c)
		moved := lastSpreadLogged(c)
		done := time.Since(started) >= scaleOutFirstSpread || (!moved.IsZero() && time.Since(moved) >= scaleOutSpreadQuiet)
		if err == nil && spread && done {
			return nil
		}
		if err != nil {
			what = err.Error()
		}
		last = what
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: after %s: %s", timeout, last)
		}
		if err := sleepCtx(ctx, time.Second); err != nil {
			return err
		}
	}
}

// leadersSpread reads GET /v1/cluster on c's first node and reports whether
// its shard streams' leaders are spread (see waitLeadersSpread), with the
// leaders it counted per node.
func leadersSpread(client *http.Client, c *agentdCluster) (bool, string, error) {
	resp, err := client.Get("http://" + c.nodes[0].httpAddr + "/v1/cluster")
	if err != nil {
		return false, "", err
	}
	defer resp.Body.Close()
	var info struct {
		Shards  int `json:"shards"`
		Streams []struct {
			Name   string `json:"name"`
			Leader string `json:"leader"`
		} `json:"streams"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		return false, "", fmt.Errorf("GET /v1/cluster: %s: %w", resp.Status, err)
	}
	if info.Shards <= 1 {
		return true, "unsharded", nil
	}
	led := map[string]int{}
	for _, nd := range c.nodes {
		led[nd.name] = 0
	}
	for _, st := range info.Streams {
		if !strings.HasPrefix(st.Name, "FOREVER_EVENTS_") && !strings.HasPrefix(st.Name, "FOREVER_CHUNKS_") {
			continue
		}
		if st.Leader == "" {
			return false, st.Name + " has no leader", nil
		}
		led[st.Leader]++
	}
	lo, hi := -1, 0
	for _, k := range led {
		if lo < 0 || k < lo {
			lo = k
		}
		hi = max(hi, k)
	}
	return lo > 0 && hi-lo <= 2, fmt.Sprintf("leaders per node %v", led), nil
}

// profileFlags are the flags every node gets: --local-rate=-1, and
// --pprof when the nodes are profiled.
func profileFlags(dir string) []string {
	if dir == "" {
		return []string{"--local-rate=-1"}
	}
	return []string{"--local-rate=-1", "--pprof"}
}

// startProfiles asks each node of c (started with --pprof) for a CPU
// profile of the next d, written to dir/<n>nodes-<prefix><node>.pprof;
// wait waits for them. With dir empty it does nothing. The profiles say where a
// node's CPU went in the window (go tool pprof -top FILE).
func startProfiles(dir, prefix string, c *agentdCluster, d time.Duration) (wait func() error, err error) {
	if dir == "" {
		return func() error { return nil }, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	secs := max(1, int(d.Round(time.Second)/time.Second))
	for i, nd := range c.nodes {
		out := filepath.Join(dir, fmt.Sprintf("%dnodes-%s%s.pprof", len(c.nodes), prefix, nd.name))
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", nd.metrics, secs)
		wg.Go(func() { errs[i] = fetchTo(url, out, d+time.Minute) })
	}
	return func() error { wg.Wait(); return errors.Join(errs...) }, nil
}

// fetchTo writes what a GET of url answers to the file out.
func fetchTo(url, out string, timeout time.Duration) error {
	resp, err := (&http.Client{Timeout: timeout}).Get(url)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("bench: %s: %s %s", url, resp.Status, b)
	}
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	_, err = io.Copy(f, resp.Body)
	return errors.Join(err, f.Close())
}

// nodeSnapshot is what a node's /metrics and /proc/<pid>/stat say at one
// moment.
type nodeSnapshot struct {
	cursors map[string]float64 // forever_eventlog_projection_cursor by projection
	ticks   int64              // utime+stime
}

// applied is how many events the node's views applied since b: the "runs"
// projection's forever_eventlog_projection_events_applied_total, or where
// a node has none (a release before it) how many stream sequences its
// cursor went through (of an unsharded log: a sharded one's cursor names
// its shard); 0 when either snapshot has neither.
func (s nodeSnapshot) applied(b nodeSnapshot) float64 {
	if x, ok := s.cursors["applied:runs"]; ok {
		if y, ok := b.cursors["applied:runs"]; ok {
			return x - y
		}
	}
	x, ok1 := s.cursors["runs"]
	y, ok2 := b.cursors["runs"]
	if !ok1 || !ok2 {
		return 0
	}
	return x - y
}

func everyHasRuns(snaps []nodeSnapshot) bool {
	for _, s := range snaps {
		if _, ok := s.cursors["runs"]; !ok {
			return false
		}
	}
	return true
}

// nodeSnapshots reads every node at once: a node held to its quota may
// take a while to answer /metrics, and one after the other the nodes'
// readings would be seconds apart.
func nodeSnapshots(c *agentdCluster) ([]nodeSnapshot, error) {
	out := make([]nodeSnapshot, len(c.nodes))
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, nd := range c.nodes {
		if nd.cmd == nil {
			return nil, fmt.Errorf("bench: %s is not running", nd.name)
		}
		pid := nd.cmd.Process.Pid
		wg.Go(func() {
			t, err := procTicks(pid)
			if err != nil {
				errs[i] = err
				return
			}
			cur, err := projectionCursors("http://" + nd.metrics + "/metrics")
			if err != nil {
				errs[i] = fmt.Errorf("bench: %s: %w", nd.name, err)
				return
			}
			out[i] = nodeSnapshot{cursors: cur, ticks: t}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// metricsPage reads the /metrics page at url.
func metricsPage(url string) ([]byte, error) {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// projectionCursors reads every forever_eventlog_projection_cursor of a
// /metrics page, with each projection's lag under "lag:<projection>" (the
// highest of its streams' series: a sharded log has one a shard), its
// events applied under "applied:<projection>", and the node's live
// follows' reads of the log under "live:<why>"
// (forever_replay_live_reads_total).
func projectionCursors(url string) (map[string]float64, error) {
	body, err := metricsPage(url)
	if err != nil {
		return nil, err
	}
	return cursorsIn(body), nil
}

// cursorsIn is projectionCursors of a /metrics page already read.
func cursorsIn(body []byte) map[string]float64 {
	kinds := []struct{ prefix, key string }{
		{`forever_eventlog_projection_cursor{projection="`, ""},
		{`forever_eventlog_projection_lag_events{projection="`, "lag:"},
		{`forever_eventlog_projection_events_applied_total{projection="`, "applied:"},
		{`forever_replay_live_reads_total{why="`, "live:"},
	}
	cur := map[string]float64{}
	for line := range strings.Lines(string(body)) {
		line = strings.TrimSpace(line)
		for _, k := range kinds {
			rest, ok := strings.CutPrefix(line, k.prefix)
			if !ok {
				continue
			}
			name, _, ok1 := strings.Cut(rest, `"`)
			_, val, ok2 := strings.Cut(rest, "} ")
			v, err := strconv.ParseFloat(val, 64)
			if !ok1 || !ok2 || err != nil {
				break
			}
			key := k.key + name
			if old, seen := cur[key]; !seen || v > old {
				cur[key] = v
			}
			break
		}
	}
	return cur
}

// procTicks is a process's utime+stime, in clock ticks.
func procTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("bench: %w", err)
	}
	// Fields after the command, which is in parentheses: state is field 3,
	// utime 14 and stime 15.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("bench: /proc/%d/stat: unexpected %q", pid, b)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("bench: /proc/%d/stat: %w", pid, err)
	}
	return u + s, nil
}

// loadAvg is the 1-minute load average, "?" where unknown.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cpuCgroupsUnusable says why cgroup v1 cpu cgroups cannot be made here,
// or "" when they can: it creates one, sets its quota and removes it.
func cpuCgroupsUnusable() string {
	if _, err := os.Stat(filepath.Join(cpuCgroupRoot, "cpu.cfs_quota_us")); err != nil {
		return "no cgroup v1 cpu controller at " + cpuCgroupRoot + " (" + err.Error() + ")"
	}
	probe := filepath.Join(cpuCgroupRoot, fmt.Sprintf("forever-bench-probe-%d", os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil {
		return "cannot create a cpu cgroup: " + err.Error()
	}
	defer os.Remove(probe)
	if err := os.WriteFile(filepath.Join(probe, "cpu.cfs_quota_us"), []byte("50000"), 0o644); err != nil {
		return "cannot set a cpu cgroup's quota: " + err.Error()
	}
	return ""
}

// cpuCgroups are the cgroups of one cluster's nodes, one per node, each
// with quota CPUs.
type cpuCgroups struct {
	run   string
	quota float64
	dirs  map[string]string // by node name
}

// newCPUCgroups returns the cgroups of one cluster's nodes, each with
// quota CPUs, named apart from any other run's.
func newCPUCgroups(quota float64) *cpuCgroups {
	return &cpuCgroups{run: fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano()%1e6), quota: quota}
}

// add puts pid in node's cgroup, creating it with its quota on first use.
func (g *cpuCgroups) add(node string, pid int) error {
	if g.dirs == nil {
		g.dirs = map[string]string{}
	}
	dir, ok := g.dirs[node]
	if !ok {
		dir = filepath.Join(cpuCgroupRoot, "forever-bench-"+g.run+"-"+node)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("bench: cgroup: %w", err)
		}
		g.dirs[node] = dir
		quota := strconv.Itoa(int(g.quota * cfsPeriodUS))
		if err := errors.Join(
			os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte(strconv.Itoa(cfsPeriodUS)), 0o644),
			os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(quota), 0o644),
		); err != nil {
			return fmt.Errorf("bench: cgroup %s: %w", dir, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("bench: cgroup %s: add %d: %w", dir, pid, err)
	}
	return nil
}

// remove removes every cgroup once its processes are gone, retrying for a
// few seconds while the kernel still counts an exiting one.
func (g *cpuCgroups) remove() error {
	var errs []error
	for _, dir := range g.dirs {
		var err error
		for range 50 {
			if err = os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("bench: remove cgroup: %w", err))
		}
	}
	return errors.Join(errs...)
}
