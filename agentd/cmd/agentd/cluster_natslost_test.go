package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/replay"
	"github.com/forever-agents/forever/verify"
)

// testClusterNATSNodeLost: a node dies, and its NATS server with it (the
// embedded server is one of the three JetStream peers), while steps
// fibers and chat turns run on every node and commands keep arriving.
// With R3 streams a write is acknowledged once a quorum stored it, so
// every write a client saw acknowledged, before the loss and after, is in
// the log; the log keeps every invariant verify checks; every turn ends
// with its finish chunk, those on surviving nodes whose chunk writes
// failed while the chunks stream elected a leader included; commands
// sent during the elections succeed or get a 503 (retried); and a replay
// that followed a chat stream through the loss saw exactly its chunks.
func testClusterNATSNodeLost(t *testing.T, c *crashClient, nodes []*clusterNode, agents []string) {
	var acked []verify.Ack
	streams := map[string]string{} // chat agent: its last turn's stream
	round := func(n int) {
		for _, a := range agents {
			if strings.HasPrefix(a, "steps:") {
				var reply struct{ Fiber string }
				json.Unmarshal(c.command(a, "start", map[string]int{"steps": 8, "delayMs": 100}), &reply)
				acked = append(acked, verify.Ack{Agent: a, ID: reply.Fiber})
				continue
			}
			if s, ok := streams[a]; ok {
				waitStreamEnd(t, c, a, s) // one turn at a time per agent
			}
			reply := chatAfterRecovery(t, c, a, fmt.Sprintf("round %d: tell me about tides", n))
			acked = append(acked, verify.Ack{Agent: a, ID: reply.RequestID})
			streams[a] = reply.StreamID
		}
	}
	round(1)
	const agent = "chat1"
	stream := streams[agent]
	followed := make(chan []replay.Item, 1)
	go func() { followed <- followAcrossRestarts(t, c, agent, stream) }()
	victim := nodes[2]
	victim.proc.kill()
	t.Logf("killed %s and its NATS server with %d writes acknowledged", victim.name, len(acked))
	round(2)
	for a, s := range streams {
		waitStreamEnd(t, c, a, s)
	}
	var steps []string
	for _, a := range agents {
		if strings.HasPrefix(a, "steps:") {
			steps = append(steps, a)
		}
	}
	c.waitFor("every steps fiber ended", steps, func(evs []eventlog.Event) bool {
		ended := 0
		for _, e := range evs {
			switch e.Type {
			case "fiber.completed", "fiber.failed", "fiber.abandoned":
				ended++
			}
		}
		return ended >= 2*len(steps)
	})
	rep, err := verify.Check(t.Context(), c.lg, verify.Options{Acked: acked})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Acked != len(acked) {
		t.Errorf("after losing %s: %d of %d acknowledged writes checked\n%s", victim.name, rep.Acked, len(acked), rep)
	}
	checkFollowed(t, <-followed, waitStreamEnd(t, c, agent, stream))
}

// chatAfterRecovery sends a chat turn, retrying while the agent's previous
// turn waits for its recovery: a turn whose owner died after its last
// chunk but before its records is recovered by the new owner, and until
// then a new turn is refused (409) rather than started beside it.
func chatAfterRecovery(t *testing.T, c *crashClient, agent, text string) chathost.Reply {
	t.Helper()
	data, _ := json.Marshal(map[string]string{"text": text})
	deadline := time.Now().Add(60 * time.Second)
	for {
		msg, err := c.nc.Request(fmt.Sprintf("forever.cmd.%s.chat", agent), data, 30*time.Second)
		if err != nil {
			t.Fatalf("%s chat: %v", agent, err)
		}
		code := msg.Header.Get("Nats-Service-Error-Code")
		// A 409 that names a turn still waiting for recovery, or still
		// recording its end (its stream ended; its end records wait for an
		// election), is retried: the turn ends without the client.
		retry := code == "503" || (code == "409" && (strings.Contains(string(msg.Data), "waits for recovery") ||
			strings.Contains(string(msg.Data), "is still recording its end")))
		if code == "" {
			var reply chathost.Reply
			if err := json.Unmarshal(msg.Data, &reply); err != nil {
				t.Fatalf("%s chat: %v: %s", agent, err, msg.Data)
			}
			return reply
		}
		if !retry || time.Now().After(deadline) {
			t.Fatalf("%s chat: error %s: %s", agent, code, msg.Data)
		}
		time.Sleep(100 * time.Millisecond) // not a synchronisation: a retry's backoff
	}
}
