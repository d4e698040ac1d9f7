package main

import (
	"io"
	"net/http"
	"strings"
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
	time.Sleep(500 * time.Millisecond)
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
		time.Sleep(100 * time.Millisecond)
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
}
