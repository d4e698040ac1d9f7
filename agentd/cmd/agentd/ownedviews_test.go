package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/agents"
	"github.com/forever-agents/forever/eventlog"
)

// TestClusterOwnedViews: three nodes started as the chart starts its pods,
// sharded (--shards 4), which gives owned views by default (no
// --owned-views). Each node's views apply its own
// partitions' events only (the nodes' runs views together applied far
// fewer events than three times the log's), reads of an agent's views
// answer on any node (routed to the owner), the listing on any node has
// every agent once, also paged; so they do after a node's partitions moved
// to the others (which caught them up) and back (it resumed them), and
// verify is clean.
func TestClusterOwnedViews(t *testing.T) {
	parallel(t, cluster, 90)
	bin := buildBinary(t)
	nodes, c, ids := startCluster(t, bin, "FOREVER_SHARDS=4")
	// say sends each chat agent a message and returns its turn's stream.
	say := func(round string) map[string]string {
		streams := map[string]string{}
		for _, a := range ids {
			if !strings.HasPrefix(a, "steps:") {
				var reply chathost.Reply
				json.Unmarshal(c.command(a, "chat", map[string]string{"text": round + " " + a}), &reply)
				streams[a] = reply.StreamID
			}
		}
		return streams
	}
	// Every turn ends before the next round and before a node leaves or
	// comes back: a chat to an agent whose turn still streams, or waits
	// for its recovery after a handover, is refused (409, a turn is
	// active), as designed. The test once sent "again" while a "hello"
	// turn still ran.
	ended := func(streams map[string]string) {
		for a, s := range streams {
			waitStreamEnd(t, c, a, s)
		}
	}
	for _, a := range ids {
		if strings.HasPrefix(a, "steps:") {
			c.command(a, "start", map[string]int{"steps": 2, "delayMs": 10})
		}
	}
	first := say("hello")
	for _, a := range ids {
		if strings.HasPrefix(a, "steps:") {
			c.waitFor("the steps fiber of "+a+" to complete", []string{a}, func(evs []eventlog.Event) bool {
				return slices.ContainsFunc(evs, func(e eventlog.Event) bool { return e.Type == "fiber.completed" })
			})
		}
	}
	checkReads(t, nodes, ids, 1)
	checkOwnedViewsStats(t, c, nodes)
	ended(first)
	// A handover: node 2 stops, its partitions go to the others, which
	// catch them up from nothing; then it comes back and takes its share
	// again, resuming from the rows and cursors it kept.
	if err := nodes[2].proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-nodes[2].proc.exited; err != nil {
		t.Fatalf("%s exit: %v", nodes[2].name, err)
	}
	nodes[2].proc.exited <- nil
	waitBalanced(t, nodes[:2])
	again := say("again")
	checkReads(t, nodes[:2], ids, 2)
	ended(again)
	nodes[2].start(t, bin)
	waitReady(t, nodes...)
	waitBalanced(t, nodes)
	last := say("once more")
	checkReads(t, nodes, ids, 3)
	ended(last)
	checkWriters(t, c, ids)
	out, code := runVerifyCmd(t, bin, "verify", "--nats-url", "nats://"+nodes[0].nats)
	if code != 0 || !strings.HasPrefix(lastLine(out), "ok:") {
		t.Errorf("verify: exit %d\n%s", code, out)
	}
}

// checkReads reads, on every node of nodes, each chat agent's streams (a
// view of the chunks stream: answered by its owner) and the listing (from
// every partition's owner): each chat has streams, and the listing has
// every agent once, in one page and paged.
func checkReads(t *testing.T, nodes []*clusterNode, ids []string, streams int) {
	t.Helper()
	for _, nd := range nodes {
		for _, a := range ids {
			if strings.HasPrefix(a, "steps:") {
				continue
			}
			// A chat's reply comes before its stream's first chunk is
			// stored and projected: wait for it.
			var page struct{ Streams []json.RawMessage }
			for deadline := time.Now().Add(30 * time.Second); ; {
				getJSON(t, "http://"+nd.http+"/v1/agents/"+a+"/streams", &page)
				if len(page.Streams) == streams || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond) // not a synchronisation: the interval of a poll on the projected streams
			}
			if len(page.Streams) != streams {
				t.Errorf("streams of %s on %s: %d, want %d", a, nd.name, len(page.Streams), streams)
			}
		}
	}
	for _, nd := range nodes {
		var page agents.Page
		getJSON(t, "http://"+nd.http+"/v1/agents?limit=100", &page)
		if got := listed(page.Agents); !sameSet(got, ids) {
			t.Errorf("listing on %s: %d agents %v, want the %d %v", nd.name, len(got), got, len(ids), ids)
		}
		var all []string
		for cursor, n := "", 0; ; n++ {
			var page agents.Page
			getJSON(t, "http://"+nd.http+"/v1/agents?limit=7&cursor="+cursor, &page)
			all = append(all, listed(page.Agents)...)
			if page.Next == "" || n > 10 {
				break
			}
			cursor = page.Next
		}
		if !sameSet(all, ids) || len(all) != len(ids) {
			t.Errorf("listing on %s by pages of 7: %v, want each of %v once", nd.name, all, ids)
		}
	}
}

// checkOwnedViewsStats checks that the nodes' runs views, together,
// applied about the log's events, not one time each.
func checkOwnedViewsStats(t *testing.T, c *crashClient, nodes []*clusterNode) {
	t.Helper()
	// Each node applied its own partitions' events: together about the
	// log's events, not three times them.
	js, err := jetstream.New(c.nc)
	if err != nil {
		t.Fatal(err)
	}
	var stored uint64
	for _, name := range c.lg.EventsStreams() {
		st, err := js.Stream(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		stored += info.State.Msgs
	}
	var applied float64
	for _, nd := range nodes {
		n := metric(t, nd.metrics, `forever_eventlog_projection_events_applied_total{projection="runs"}`)
		t.Logf("%s: runs view applied %g events", nd.name, n)
		applied += n
	}
	t.Logf("the nodes applied %g events, the log holds %d", applied, stored)
	if applied >= 2*float64(stored) {
		t.Errorf("the nodes' runs views applied %g events, the log holds %d: each node applied others' partitions", applied, stored)
	}
}

func listed(es []agents.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Agent
	}
	return out
}

func sameSet(got, want []string) bool {
	g, w := slices.Clone(got), slices.Clone(want)
	slices.Sort(g)
	slices.Sort(w)
	return slices.Equal(slices.Compact(g), w)
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var body strings.Builder
		bufio.NewReader(resp.Body).WriteTo(&body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body.String())
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
