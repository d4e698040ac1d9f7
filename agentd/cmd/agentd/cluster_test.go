package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/chartargs"
	"github.com/forever-agents/forever/replay"
)

// clusterTTL is the lease TTL of the loopback cluster tests: the chart's
// default. A shorter one would not make failover faster when the dead node
// led a stream: JetStream elects its new leader after 4 to 9 s.
const clusterTTL = chartargs.DefaultLeaseTTL

// clusterNode is one agentd of a loopback cluster, started with the flags
// the Helm chart gives a pod.
type clusterNode struct {
	name                     string
	data, http, nats, routes string
	metrics                  string // --metrics-listen
	args, env                []string
	proc                     *agentdProc
	outs                     []*agentdtest.SyncBuffer // every run's output, kept for a failure
}

// newCluster prepares n nodes on loopback (not started), each started as the
// chart starts a pod (chartargs), with loopback addresses and a short TTL.
func newCluster(t *testing.T, n int, opts ...func(*chartargs.Pod)) []*clusterNode {
	t.Helper()
	var routes []string
	nodes := make([]*clusterNode, n)
	for i := range nodes {
		nodes[i] = &clusterNode{
			name: fmt.Sprintf("forever-%d", i),
			data: filepath.Join(t.TempDir(), "data"),
			http: agentdtest.FreeAddr(t), nats: agentdtest.FreeAddr(t), routes: agentdtest.FreeAddr(t),
			metrics: agentdtest.FreeAddr(t),
		}
		routes = append(routes, "nats://"+nodes[i].routes)
	}
	keepLogs(t, nodes)
	for _, nd := range nodes {
		pod := chartargs.Pod{
			Name: nd.name, Data: nd.data, HTTP: nd.http, MetricsListen: nd.metrics, NATSListen: nd.nats,
			Cluster: "forever", ClusterListen: nd.routes, Routes: routes,
			Replicas: chartargs.Replicas(n), LeaseTTL: clusterTTL,
		}
		for _, o := range opts {
			o(&pod)
		}
		nd.args = chartargs.Args(pod)
		// The local model slowed down, so a turn is still streaming when
		// its owner is killed.
		nd.env = append(chartargs.Env(pod), "FOREVER_LOCAL_RATE=15")
	}
	return nodes
}

// keepLogs writes the output of every run of nodes to a new directory
// when t failed, and logs its name.
func keepLogs(t *testing.T, nodes []*clusterNode) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		dir, err := os.MkdirTemp("", "forever-cluster-")
		if err != nil {
			return
		}
		for _, nd := range nodes {
			for i, out := range nd.outs {
				os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s.%d.log", nd.name, i)), []byte(out.String()), 0o644)
			}
		}
		t.Logf("node logs in %s", dir)
	})
}

// start starts the node's process; wait with waitReady.
func (nd *clusterNode) start(t *testing.T, bin string) {
	t.Helper()
	p := &agentdProc{out: &agentdtest.SyncBuffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(bin, nd.args...)
	p.cmd.Env = append(os.Environ(), nd.env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { p.kill() })
	nd.proc = p
	nd.outs = append(nd.outs, p.out)
}

// ready reports whether the node answers /readyz with 200.
func (nd *clusterNode) ready() bool {
	resp, err := http.Get("http://" + nd.http + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func waitReady(t *testing.T, nodes ...*clusterNode) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for _, nd := range nodes {
		for !nd.ready() {
			select {
			case err := <-nd.proc.exited:
				nd.proc.exited <- err
				t.Fatalf("%s exited before ready: %v\n%s", nd.name, err, nd.proc.out.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not ready:\n%s", nd.name, nd.proc.out.String())
			}
			time.Sleep(50 * time.Millisecond) // not a synchronisation: the interval of a poll on the node's /readyz
		}
	}
}

// portTaken returns a node that exited at start because a port was in use,
// after giving each node a moment to bind.
func portTaken(nodes []*clusterNode) *clusterNode {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, nd := range nodes {
			select {
			case err := <-nd.proc.exited:
				nd.proc.exited <- err
				if strings.Contains(nd.proc.out.String(), "is in use") {
					return nd
				}
				return nil
			default:
			}
		}
		time.Sleep(50 * time.Millisecond) // not a synchronisation: the interval of a poll on a node exiting on a port in use
	}
	return nil
}

// waitBalanced waits until every node owns its share of the 64 partitions:
// the first node up takes them all, and hands them off as the others join.
func waitBalanced(t *testing.T, nodes []*clusterNode) {
	t.Helper()
	// Each node owns at most ceil(64/n), so at least what the rest leave.
	limit := (64 + len(nodes) - 1) / len(nodes)
	share := 64 - (len(nodes)-1)*limit
	deadline := time.Now().Add(60 * time.Second)
	for {
		var owned []int
		for _, nd := range nodes {
			owned = append(owned, nd.partitions())
		}
		if !slices.ContainsFunc(owned, func(n int) bool { return n < share }) {
			t.Logf("partitions owned: %v", owned)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("partitions never balanced: %v", owned)
		}
		time.Sleep(100 * time.Millisecond) // not a synchronisation: the interval of a poll on the partitions balanced
	}
}

// readyz returns the node's /readyz body, or the error getting it.
func (nd *clusterNode) readyz() string {
	resp, err := http.Get("http://" + nd.http + "/readyz")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.Status + " " + string(b)
}

// partitions returns how many partitions the node owns, from /readyz.
func (nd *clusterNode) partitions() int {
	resp, err := http.Get("http://" + nd.http + "/readyz")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var h struct{ Partitions int }
	json.NewDecoder(resp.Body).Decode(&h)
	return h.Partitions
}

// clusterClient talks to the cluster through one node's NATS port, with
// every node's URL to fail over to.
func clusterClient(t *testing.T, nodes []*clusterNode) *crashClient {
	t.Helper()
	var urls []string
	for _, nd := range nodes {
		urls = append(urls, "nats://"+nd.nats)
	}
	// Pings find a stalled (SIGSTOPped) server within seconds, so the
	// client moves to another node instead of waiting on it.
	nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.PingInterval(time.Second), nats.MaxPingsOutstanding(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	lg, err := eventlog.Open(t.Context(), eventlog.Config{Conn: nc, Bind: true})
	if err != nil {
		t.Fatal(err)
	}
	// A command may wait for a partition's new owner (up to 10s) and then
	// for its writes: the request outlasts that, so it is not resent.
	return &crashClient{t: t, nc: nc, lg: lg, timeout: 30 * time.Second}
}

// ownerOf asks the cluster for the agent's status and returns its owner.
func ownerOf(c *crashClient, agent string) host.Status {
	var st host.Status
	if err := json.Unmarshal(c.command(agent, "status", nil), &st); err != nil {
		c.t.Fatalf("status of %s: %v", agent, err)
	}
	return st
}

// checkWriters proves from the log that no agent was written by two owners
// interleaved, on its events and on each of its chat streams.
func checkWriters(t *testing.T, c *crashClient, agents []string) {
	t.Helper()
	for _, a := range agents {
		evs := c.events(a)
		if err := eventlog.CheckWriters(evs); err != nil {
			t.Errorf("agent %s: %v", a, err)
		}
		chunks, err := c.lg.Read(t.Context(), eventlog.Filter{Agent: a, Chunks: true}, 0, 0)
		if err != nil {
			t.Fatalf("read chunks of %s: %v", a, err)
		}
		byStream := map[string][]eventlog.Event{}
		for _, e := range chunks {
			byStream[e.Stream] = append(byStream[e.Stream], e)
		}
		for s, evs := range byStream {
			if err := eventlog.CheckWriters(evs); err != nil {
				t.Errorf("agent %s stream %s: %v", a, s, err)
			}
		}
	}
}

// TestCluster runs three agentd nodes on loopback, started as the Helm
// chart starts its pods, with R3 streams, and takes nodes away under load.
func TestCluster(t *testing.T) {
	// Not in parallel with the other black-box tests: its failovers race
	// JetStream elections, which CPU starvation on a 2-core runner stretches.
	// Three race-instrumented nodes with R3 fsynced streams overload a
	// 2-core machine until commands time out; the race detector covers the
	// same code in the in-process and single-binary tests.
	bin := buildBinaryRace(t, false)
	// Each case gets a fresh cluster: a node that was killed and restarted
	// must first catch its JetStream replicas up, and until it has, losing
	// another node loses quorum, which is JetStream's rule and not the case
	// under test. Its cases run clusterLanes at a time, the longest first
	// (about how many seconds each takes on CI, as in binaryCases).
	lanes := newScheduler(clusterLanes, parallelTests)
	runCase := func(name string, secs int, f func(t *testing.T)) {
		w := lanes.register(1, secs)
		var ran atomic.Bool
		t.Run(name, func(t *testing.T) {
			ran.Store(true)
			t.Parallel()
			lanes.arrive(w)
			lanes.hold(t, w, "a lane")
			f(t)
		})
		// A parallel case has started when Run returns, unless -run
		// skipped it: then it never arrives, and must not hold the others.
		if !ran.Load() {
			lanes.withdraw(w)
		}
	}
	runCase("OwnerDies", 62, func(t *testing.T) {
		nodes, c, agents := startCluster(t, bin)
		testClusterOwnerDies(t, bin, c, nodes, agents)
		checkWriters(t, c, agents)
	})
	runCase("SIGTERM", 19, func(t *testing.T) {
		nodes, c, _ := startCluster(t, bin)
		testClusterSIGTERM(t, bin, c, nodes)
		checkWriters(t, c, []string{"steps:term"})
		// The cluster serves again (the node stopped started again), and
		// PartitionMismatch kills no node: its odd node is tried on this
		// cluster rather than on one more (about 10 s of this test). It
		// comes last: the odd node's server joins the cluster, JetStream's
		// meta group too, before agentd refuses to start, so no case that
		// kills a node runs on this cluster after it.
		t.Run("PartitionMismatch", func(t *testing.T) { testClusterPartitionMismatch(t, bin, nodes) })
	})
	runCase("StaleOwner", 45, func(t *testing.T) {
		nodes, c, _ := startCluster(t, bin)
		testClusterStaleOwner(t, bin, c, nodes)
		checkWriters(t, c, []string{"steps:stale"})
	})
	runCase("Join", 19, func(t *testing.T) {
		nodes, c, agents := startCluster(t, bin)
		testClusterJoin(t, bin, c, nodes, agents)
		checkWriters(t, c, agents)
	})
	runCase("NATSNodeLost", 45, func(t *testing.T) {
		nodes, c, agents := startCluster(t, bin)
		testClusterNATSNodeLost(t, c, nodes, agents)
		checkWriters(t, c, agents)
	})
	runCase("Subagent", 52, func(t *testing.T) {
		nodes, c, _ := startCluster(t, bin)
		testClusterSubagent(t, c, nodes)
		verifyLog(t, c)
	})
	runCase("StoreFull", 69, func(t *testing.T) {
		nodes, c, agents := startCluster(t, bin, "FOREVER_JS_MAX_STORE=64MiB")
		testClusterStoreFull(t, c, nodes, agents)
		// The store has room again and no node was stopped: Console's
		// view is checked on this cluster rather than on one more (about
		// 10 s of this test). It comes last: it kills a node.
		t.Run("Console", func(t *testing.T) { testClusterConsole(t, nodes) })
	})
	runCase("NoQuorum", 45, func(t *testing.T) { testClusterNoQuorum(t, bin) })
	runCase("Auth", 45, func(t *testing.T) { testClusterAuth(t, bin) })
	runCase("Backup", 125, func(t *testing.T) { testClusterBackup(t, bin) })
}

// clusterLanes is how many of TestCluster's cases run at once, each on
// its own three nodes. Its nodes are not race-built and mostly wait (for
// lease TTLs, elections, the slowed local model): one case at a time kept
// a 2-core machine at a load of 0.1 to 1 for its 520 s, on the package's
// critical path, since the other black-box tests wait for it.
const clusterLanes = 2

// startCluster starts three nodes as the chart starts its pods (with the
// environment variables env added), waits until they are ready and share
// the partitions, and checks that 30 agents spread over all three.
// FOREVER_TEST_CLUSTER_ENV adds to every node's env (testClusterEnv).
func startCluster(t *testing.T, bin string, env ...string) ([]*clusterNode, *crashClient, []string) {
	env = append(testClusterEnv(), env...)
	var nodes []*clusterNode
	for attempt := 1; ; attempt++ {
		nodes = newCluster(t, 3)
		for _, nd := range nodes {
			nd.env = append(nd.env, env...)
			nd.start(t, bin)
		}
		// A port freeAddr picked may be taken (by an outgoing connection's
		// ephemeral port) before the node binds it: start over on new ones.
		if lost := portTaken(nodes); lost == nil || attempt == 3 {
			break
		} else {
			t.Logf("%s could not bind its port, restarting the cluster: %s", lost.name, lost.proc.out.String())
		}
		for _, nd := range nodes {
			nd.proc.kill()
		}
	}
	waitReady(t, nodes...)
	waitBalanced(t, nodes)
	// Started as the chart starts its pods, without --shards: a new
	// cluster gets agentd's default shards.
	var info agentd.ClusterInfo
	getJSON(t, "http://"+nodes[0].http+"/v1/cluster", &info)
	if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "FOREVER_SHARDS=") }) && info.Shards != agentd.DefaultShards {
		t.Errorf("a new cluster started as the chart starts its pods has %d shards, want the default %d", info.Shards, agentd.DefaultShards)
	}
	c := clusterClient(t, nodes)
	var agents []string
	owners := map[string]int{}
	for i := range 30 {
		a := fmt.Sprintf("steps:c%d", i)
		if i%2 == 1 {
			a = fmt.Sprintf("chat%d", i)
		}
		agents = append(agents, a)
		st := ownerOf(c, a)
		if st.Owner == "" {
			t.Fatalf("status of %s names no owner: %+v", a, st)
		}
		owners[st.Owner]++
	}
	t.Logf("owners of 30 agents: %v", owners)
	if len(owners) != 3 {
		t.Errorf("30 agents are owned by %d nodes, want all 3: %v", len(owners), owners)
	}
	return nodes, c, agents
}

func nodeNamed(nodes []*clusterNode, name string) *clusterNode {
	i := slices.IndexFunc(nodes, func(nd *clusterNode) bool { return nd.name == name })
	if i < 0 {
		return nil
	}
	return nodes[i]
}

func testClusterOwnerDies(t *testing.T, bin string, c *crashClient, nodes []*clusterNode, agents []string) {
	// Steps fibers on every steps agent, then a chat mid-turn.
	for _, a := range agents {
		if strings.HasPrefix(a, "steps:") {
			c.command(a, "start", map[string]int{"steps": 30, "delayMs": 300})
		}
	}
	const agent = "chat1"
	var reply chathost.Reply
	json.Unmarshal(c.command(agent, "chat", map[string]string{"text": "Tell me a story about a lighthouse."}), &reply)
	owner := ownerOf(c, agent)
	victim := nodeNamed(nodes, owner.Owner)
	followed := make(chan []replay.Item, 1)
	go func() { followed <- followAcrossRestarts(t, c, agent, reply.StreamID) }()
	deadline := time.Now().Add(30 * time.Second)
	for len(c.streamChunks(agent, reply.StreamID)) < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("stream did not grow:\n%s", victim.proc.out.String())
		}
		time.Sleep(20 * time.Millisecond) // not a synchronisation: the interval of a poll on the stream's growth
	}
	victim.proc.kill()
	killedAt := time.Now()
	if chunks := c.streamChunks(agent, reply.StreamID); chunks[len(chunks)-1].Terminal() {
		t.Fatalf("the turn ended before its owner was killed; nothing to take over")
	}
	// Another node takes the partition and writes the agent.
	var firstNew time.Time
	for firstNew.IsZero() {
		for _, e := range c.events(agent) {
			if e.Writer.Node != "" && e.Writer.Node != victim.name && e.Time.After(killedAt) {
				firstNew = e.Time
				break
			}
		}
		if time.Since(killedAt) > 4*clusterTTL+10*time.Second {
			t.Fatalf("no other node wrote %s after its owner died", agent)
		}
		time.Sleep(50 * time.Millisecond) // not a synchronisation: the interval of a poll on another node's first event
	}
	t.Logf("owner %s killed; failover to the first event of the new owner: %s (lease TTL %s)",
		victim.name, firstNew.Sub(killedAt).Round(time.Millisecond), clusterTTL)
	chunks := waitStreamEnd(t, c, agent, reply.StreamID)
	checkOneAssistant(t, c, agent)
	items := <-followed
	checkFollowed(t, items, chunks)
	// The dead node comes back and takes its share again.
	victim.start(t, bin)
	waitReady(t, victim)
	deadline = time.Now().Add(4*clusterTTL + 20*time.Second)
	for {
		n := 0
		for _, a := range agents {
			if ownerOf(c, a).Owner == victim.name {
				n++
			}
		}
		if n > 0 {
			t.Logf("%s rejoined and owns %d of %d agents", victim.name, n, len(agents))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s rejoined but owns no agent", victim.name)
		}
		time.Sleep(200 * time.Millisecond) // not a synchronisation: the interval of a poll on the rejoined node owning an agent
	}
	waitFibersDone(t, c, agents)
}

func testClusterSIGTERM(t *testing.T, bin string, c *crashClient, nodes []*clusterNode) {
	const agent = "steps:term"
	owner := nodeNamed(nodes, ownerOf(c, agent).Owner)
	c.command(agent, "start", map[string]int{"steps": 10, "delayMs": 100})
	var others []*clusterNode
	for _, nd := range nodes {
		if nd != owner {
			others = append(others, nd)
		}
	}
	survivor := clusterClient(t, others)
	sent := time.Now()
	if err := owner.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var took time.Duration
	for {
		// Asked through a node that stays up, so the figure is the handoff,
		// not this client's reconnection.
		if st := ownerOf(survivor, agent); st.Owner != "" && st.Owner != owner.name {
			took = time.Since(sent)
			break
		}
		if time.Since(sent) > 30*time.Second {
			t.Fatalf("%s not taken over after SIGTERM of %s", agent, owner.name)
		}
		time.Sleep(20 * time.Millisecond) // not a synchronisation: the interval of a poll on the agent's new owner
	}
	t.Logf("SIGTERM of %s: %s owned elsewhere after %s (lease TTL %s)", owner.name, agent, took.Round(time.Millisecond), clusterTTL)
	select {
	case err := <-owner.proc.exited:
		owner.proc.exited <- err
		if err != nil {
			t.Errorf("%s exit after SIGTERM: %v", owner.name, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s still running 30s after SIGTERM", owner.name)
	}
	// The node handed its partitions off (rather than letting them expire).
	handed := false
	for _, line := range strings.Split(owner.proc.out.String(), "\n") {
		if strings.Contains(line, `"msg":"partitions handed off","subsystem":"agentd"`) ||
			strings.Contains(line, `"msg":"agentd stopping"`) || strings.Contains(line, `"partition":32,`) {
			t.Logf("%s: %s", owner.name, line)
			handed = handed || strings.Contains(line, "partitions handed off")
		}
	}
	if !handed {
		t.Errorf("%s did not hand its partitions off:\n%s", owner.name, owner.proc.out.String())
	}
	waitFibersDone(t, c, []string{agent})
	owner.start(t, bin)
	waitReady(t, owner)
}

func testClusterStaleOwner(t *testing.T, bin string, c *crashClient, nodes []*clusterNode) {
	const agent = "steps:stale"
	owner := nodeNamed(nodes, ownerOf(c, agent).Owner)
	c.command(agent, "start", map[string]int{"steps": 40, "delayMs": 100})
	time.Sleep(500 * time.Millisecond) // not a synchronisation: the point, the fibers step before the owner is stopped
	if err := owner.proc.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now()
	for {
		var newer bool
		for _, e := range c.events(agent) {
			if e.Writer.Node != "" && e.Writer.Node != owner.name && e.Time.After(stoppedAt) {
				newer = true
			}
		}
		if newer {
			break
		}
		if time.Since(stoppedAt) > 4*clusterTTL+10*time.Second {
			t.Fatalf("nobody took %s over from the stopped %s", agent, owner.name)
		}
		time.Sleep(50 * time.Millisecond) // not a synchronisation: the interval of a poll on a newer writer's event
	}
	if err := owner.proc.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFibersDone(t, c, []string{agent})
	time.Sleep(clusterTTL) // not a synchronisation: the point, a lease TTL for the woken node to try to write (no write is the proof)
	if err := eventlog.CheckWriters(c.events(agent)); err != nil {
		t.Errorf("the stale owner's writes landed after the takeover: %v", err)
	}
	waitReady(t, owner)
}

// waitFibersDone waits until no agent has a running fiber.
func waitFibersDone(t *testing.T, c *crashClient, agents []string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for _, a := range agents {
		for {
			var fibers []host.FiberInfo
			json.Unmarshal(c.command(a, "fibers", nil), &fibers)
			if len(fibers) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still has fibers: %+v", a, fibers)
			}
			time.Sleep(100 * time.Millisecond) // not a synchronisation: the interval of a poll on the agents' fibers done
		}
	}
}

// waitStreamEnd waits for the stream's terminal chunk and returns its chunks.
// streamEnded polls agent's stream until its last chunk is terminal, for
// up to within (a bound that only keeps a broken run from hanging), and
// returns its chunks and whether it ended.
func streamEnded(c *crashClient, agent, stream string, within time.Duration) ([]chunk.Chunk, bool) {
	deadline := time.Now().Add(within)
	for {
		if chunks := c.streamChunks(agent, stream); len(chunks) > 0 && chunks[len(chunks)-1].Terminal() {
			return chunks, true
		}
		if time.Now().After(deadline) {
			return nil, false
		}
		time.Sleep(50 * time.Millisecond) // not a synchronisation: the interval of a poll on the stream's terminal chunk
	}
}

// waitStreamEnd waits up to 90 s for the stream to end, with a finish.
func waitStreamEnd(t *testing.T, c *crashClient, agent, stream string) []chunk.Chunk {
	t.Helper()
	chunks, ok := streamEnded(c, agent, stream, 90*time.Second)
	if !ok {
		t.Fatalf("stream %s of %s did not end", stream, agent)
	}
	if last := chunks[len(chunks)-1]; last.Type != chunk.Finish {
		t.Errorf("stream %s ended with %+v, want finish", stream, last)
	}
	return chunks
}

// checkOneAssistant checks the history: one user message, one assistant
// message.
func checkOneAssistant(t *testing.T, c *crashClient, agent string) {
	t.Helper()
	var page struct{ Messages []chat.Message }
	json.Unmarshal(c.command(agent, "messages", nil), &page)
	if len(page.Messages) != 2 || page.Messages[0].Role != "user" || page.Messages[1].Role != "assistant" {
		t.Errorf("history of %s = %+v, want the user message and exactly one assistant message", agent, page.Messages)
	}
}

// checkFollowed checks that a reader saw every chunk of the stream once and
// in order.
func checkFollowed(t *testing.T, items []replay.Item, chunks []chunk.Chunk) {
	t.Helper()
	if len(items) != len(chunks) {
		t.Errorf("the reader saw %d chunks, the stream has %d", len(items), len(chunks))
	}
	for i := range min(len(items), len(chunks)) {
		if !sameChunk(items[i].Chunk, chunks[i]) {
			t.Errorf("reader chunk %d = %+v, stream has %+v", i, items[i].Chunk, chunks[i])
			return
		}
		if i > 0 && items[i].Cursor.Compare(items[i-1].Cursor) <= 0 {
			t.Errorf("reader cursors not increasing at %d", i)
			return
		}
	}
}

// testClusterPartitionMismatch: a fourth node started with another
// partition count than the cluster's refuses to start, naming the flag,
// instead of serving a different split of the agents.
// extraNode prepares (does not start) one more pod for the running
// cluster of nodes, routed to all of them; partitions 0 is the default.
func extraNode(t *testing.T, nodes []*clusterNode, name string, partitions int) *clusterNode {
	var routes []string
	for _, nd := range nodes {
		routes = append(routes, "nats://"+nd.routes)
	}
	nd := &clusterNode{
		name: name,
		data: filepath.Join(t.TempDir(), "data"),
		http: agentdtest.FreeAddr(t), nats: agentdtest.FreeAddr(t), routes: agentdtest.FreeAddr(t),
		metrics: agentdtest.FreeAddr(t),
	}
	pod := chartargs.Pod{
		Name: nd.name, Data: nd.data, HTTP: nd.http, MetricsListen: nd.metrics, NATSListen: nd.nats,
		Cluster: "forever", ClusterListen: nd.routes, Routes: append(routes, "nats://"+nd.routes),
		Replicas: 3, Partitions: partitions, LeaseTTL: clusterTTL,
	}
	nd.args = chartargs.Args(pod)
	nd.env = append(append(chartargs.Env(pod), "FOREVER_LOCAL_RATE=15"), testClusterEnv()...)
	keepLogs(t, []*clusterNode{nd})
	return nd
}

// testClusterEnv is FOREVER_TEST_CLUSTER_ENV, space-separated NAME=value
// pairs that startCluster and extraNode add to every node's env: for
// example "FOREVER_SHARDS=8 FOREVER_OWNED_VIEWS=true" runs TestCluster's
// cases on a sharded cluster with owned views.
func testClusterEnv() []string {
	return strings.Fields(os.Getenv("FOREVER_TEST_CLUSTER_ENV"))
}

func testClusterPartitionMismatch(t *testing.T, bin string, nodes []*clusterNode) {
	odd := extraNode(t, nodes, "forever-odd", 32)
	odd.start(t, bin)
	select {
	case err := <-odd.proc.exited:
		out := odd.proc.out.String()
		if err == nil || !strings.Contains(out, "--partitions") || !strings.Contains(out, "64 partitions") {
			t.Errorf("a node with 32 partitions in a 64-partition cluster exited with %v:\n%s", err, out)
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("a node with 32 partitions in a 64-partition cluster is still running:\n%s", odd.proc.out.String())
	}
	// The cluster still serves.
	waitReady(t, nodes...)
}
