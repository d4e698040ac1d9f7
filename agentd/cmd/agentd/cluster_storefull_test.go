package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/chat/chunk"
)

// testClusterStoreFull: three nodes, each with a small JetStream store
// (--js-max-store 64MiB), filled by an R3 stream: for longer than a lease
// TTL every node keeps its partitions and /readyz stays 200 with the full
// store under degraded; status, fibers, schedules and messages answer
// within 2 s through every node; a new chat is refused with 503 naming the
// full store; once space returns a chat completes, with no restart.
func testClusterStoreFull(t *testing.T, c *crashClient, nodes []*clusterNode, agents []string) {
	// agents[1] and agents[3] are chat agents (the others steps agents).

	const agent = "chat1"
	var first chathost.Reply
	json.Unmarshal(c.command(agent, "chat", map[string]string{"text": "hello"}), &first)
	waitStreamEnd(t, c, agent, first.StreamID)
	owned := func() (sum int, each []int) {
		for _, nd := range nodes {
			n := nd.partitions()
			each = append(each, n)
			sum += n
		}
		return sum, each
	}
	_, before := owned()

	fillStore(t, c.nc, 3)
	time.Sleep(clusterTTL + clusterTTL/2) // not a synchronisation: the point, time passing (1.5 lease TTLs) to show no partition moves
	if sum, each := owned(); sum != 64 || !equalInts(each, before) {
		t.Errorf("partitions owned after %s of a full store: %v, before %v: want them all kept", clusterTTL+clusterTTL/2, each, before)
	}
	for _, nd := range nodes {
		h := readyz(t, nd.http)
		t.Logf("%s /readyz with the store full: %d %+v", nd.name, h.code, h.Health)
		if h.code != http.StatusOK || len(h.Degraded) == 0 || !strings.Contains(h.Degraded[0], "JetStream store full") {
			t.Errorf("%s /readyz with the store full: %d %+v, want 200 with the full store under degraded", nd.name, h.code, h.Health)
		}
		nc, err := nats.Connect("nats://" + nd.nats)
		if err != nil {
			t.Fatal(err)
		}
		readsAnswer(t, nc, agent)
		readsAnswer(t, nc, agents[3])
		nc.Close()
	}
	msg, err := c.nc.Request("forever.cmd.chat3.chat", []byte(`{"text":"hello"}`), 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code, text := msg.Header.Get("Nats-Service-Error-Code"), msg.Header.Get("Nats-Service-Error"); code != "503" || !strings.Contains(text, "storage full") {
		t.Errorf("chat with the store full: %q %s, want 503 storage full", code, text)
	}

	js, _ := jetstream.New(c.nc)
	// With the store full the meta leader may be electing: JetStream
	// answers "temporarily unavailable" (10008) for a while.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) { // not a synchronisation: the interval of a poll on the ballast stream deleted
		err := js.DeleteStream(t.Context(), "BALLAST")
		if err == nil {
			break
		}
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10008 || time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	// The file streams elect their leaders again once their followers can
	// store (nats-server's election timeout, seconds).
	start := time.Now()
	for _, nd := range nodes {
		for {
			h := readyz(t, nd.http)
			if h.code == http.StatusOK && len(h.Degraded) == 0 {
				break
			}
			if time.Since(start) > 90*time.Second {
				t.Fatalf("%s after space returned: %d %+v", nd.name, h.code, h.Health)
			}
			time.Sleep(200 * time.Millisecond) // not a synchronisation: the interval of a poll on every node ready and not degraded
		}
	}
	t.Logf("every node ready and nothing degraded %s after space returned", time.Since(start).Round(time.Millisecond))
	var after chathost.Reply
	json.Unmarshal(c.command("chat3", "chat", map[string]string{"text": "hello again"}), &after)
	if cs := waitStreamEnd(t, c, "chat3", after.StreamID); cs[len(cs)-1].Type != chunk.Finish {
		t.Errorf("chat after space returned ended with %+v", cs[len(cs)-1])
	}
	for _, nd := range nodes {
		select {
		case err := <-nd.proc.exited:
			nd.proc.exited <- err
			t.Errorf("%s exited: %v", nd.name, err)
		default:
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
