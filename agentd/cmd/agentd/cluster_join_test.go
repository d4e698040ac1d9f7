package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testClusterJoin: a fourth node started as the chart starts a pod joins a
// busy 3-node cluster and takes its share of the partitions by handoff,
// while fibers step on every agent. Every fiber completes, and the log's
// writer headers show that no agent was written by two nodes interleaved.
func testClusterJoin(t *testing.T, bin string, c *crashClient, nodes []*clusterNode, agents []string) []*clusterNode {
	var steps []string
	for _, a := range agents {
		if strings.HasPrefix(a, "steps:") {
			c.command(a, "start", map[string]int{"steps": 40, "delayMs": 100})
			steps = append(steps, a)
		}
	}
	time.Sleep(500 * time.Millisecond) // not a synchronisation: the point, the fibers step before the join
	joiner := extraNode(t, nodes, "forever-3", 0)
	joined := time.Now()
	joiner.start(t, bin)
	all := append(nodes, joiner)
	waitReady(t, joiner)
	waitBalanced(t, all)
	t.Logf("the fourth node took its share %s after it started", time.Since(joined).Round(time.Millisecond))
	if n := joiner.partitions(); n == 0 {
		t.Fatalf("the joining node owns no partition")
	}
	waitFibersDone(t, c, steps)
	// Every owner change was a handoff: each moved agent's writes switch
	// node once, under a higher epoch (checkWriters, by the caller).
	moved := 0
	for _, a := range steps {
		nodesSeen := map[string]bool{}
		for _, e := range c.events(a) {
			if e.Writer.Node != "" {
				nodesSeen[e.Writer.Node] = true
			}
		}
		if nodesSeen[joiner.name] {
			moved++
		}
	}
	t.Logf("%d of %d steps agents moved to the joining node mid-run", moved, len(steps))
	return all
}

// testClusterNoQuorum: one node of a 3-replica cluster started alone (its
// routes lead nowhere, as when the others are down) must not serve without
// a JetStream quorum: it answers its probes at once (alive, 503 starting),
// says in its log what it waits for, and takes no partition; once the
// other nodes start, it joins them. (Alone, it exits after the start
// timeout, 2 min, naming the replicas; not waited for here.)
// Then quietStop runs on the three.
func testClusterNoQuorum(t *testing.T, bin string) {
	nodes := newCluster(t, 3)
	lone := nodes[0]
	lone.start(t, bin)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(lone.proc.out.String(), "waiting for the JetStream cluster") {
		select {
		case err := <-lone.proc.exited:
			t.Fatalf("a node without quorum exited at once: %v\n%s", err, lone.proc.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("a node without quorum said nothing about it in 20 s:\n%s", lone.proc.out.String())
		}
		time.Sleep(100 * time.Millisecond) // not a synchronisation: the interval of a poll on the node's 'waiting for the JetStream cluster'
	}
	// Probes get answers, not a hang: alive, not ready, starting.
	hc := &http.Client{Timeout: 2 * time.Second}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 503} {
		resp, err := hc.Get("http://" + lone.http + path)
		if err != nil {
			t.Fatalf("GET %s of a node without quorum: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || (path == "/readyz" && !strings.Contains(string(b), "starting")) {
			t.Fatalf("GET %s of a node without quorum: %d %s, want %d", path, resp.StatusCode, b, want)
		}
	}
	// A new JetStream cluster elects its first meta leader only once every
	// server its routes list is up (JetStream's rule; later, 2 of 3 do):
	// the others start, and the waiting node joins them.
	nodes[1].start(t, bin)
	nodes[2].start(t, bin)
	waitReady(t, nodes...)
	waitBalanced(t, nodes)
	quietStop(t, nodes)
}

// quietStop checks that a cluster's logs read as routine. Idle, then with
// a dead peer (killed while turns stream and fibers step on every node,
// and dead until the others have taken its partitions over: a lease TTL
// and a renewal, about 10 s; the 30 s would add to CI's critical
// path without a new kind of line), then stopped in order by SIGTERM one
// node after another, the last one alone without a JetStream quorum: no
// node logs an ERROR line, and each stops within 30 s (the last one, in
// 5 to 6 s: it does not wait out each lease write to a lost quorum).
func quietStop(t *testing.T, nodes []*clusterNode) {
	t.Helper()
	c := clusterClient(t, nodes)
	for i := range 6 {
		c.command(fmt.Sprintf("chat%d", i), "chat", map[string]string{"text": "Tell me a story."})
		c.command(fmt.Sprintf("steps:q%d", i), "start", map[string]int{"steps": 3, "delayMs": 100})
	}
	c.nc.Close()
	dead := nodes[len(nodes)-1]
	dead.proc.kill()
	killed := time.Now()
	rest := nodes[:len(nodes)-1]
	for {
		n := 0
		for _, nd := range rest {
			n += nd.partitions()
		}
		if n == 64 {
			break
		}
		if time.Since(killed) > 4*clusterTTL+20*time.Second {
			t.Fatalf("the dead peer's partitions were not taken over")
		}
		time.Sleep(100 * time.Millisecond) // not a synchronisation: the interval of a poll on the dead peer's partitions taken over
	}
	t.Logf("dead peer for %s until its partitions were taken over", time.Since(killed).Round(time.Millisecond))
	for _, nd := range rest {
		sent := time.Now()
		if err := nd.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-nd.proc.exited:
			nd.proc.exited <- err
			if err != nil {
				t.Errorf("%s exit after SIGTERM: %v", nd.name, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s still running 30 s after SIGTERM", nd.name)
		}
		t.Logf("%s stopped %s after SIGTERM", nd.name, time.Since(sent).Round(time.Millisecond))
	}
	for _, nd := range nodes {
		for _, out := range nd.outs {
			for _, line := range strings.Split(out.String(), "\n") {
				if strings.Contains(line, `"level":"ERROR"`) {
					t.Errorf("%s logged an ERROR line: %s", nd.name, line)
				}
			}
		}
	}
}
