package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
)

// testBinaryLongStop: agentd SIGSTOPped while turns stream and fibers
// step, for longer than every lease, heartbeat and timeout (3x a short
// lease TTL), then SIGCONTed: each turn and fiber either continues or is
// recovered, never both. Every turn ends with exactly one outcome and one
// assistant message, every stream's chunks are contiguous and well formed,
// every fiber ends once, and no stale write lands after the node's own
// later epoch (agentd verify and eventlog.CheckWriters over the log).
func testBinaryLongStop(t *testing.T, bin string) {
	const ttl = 3 * time.Second
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	p := startAgentd(t, bin, data, httpAddr, natsAddr, "--local-rate", "15", "--lease-ttl", ttl.String())
	c := dialAgentd(t, natsAddr)
	defer func() {
		if t.Failed() {
			t.Logf("agentd output:\n%s", p.out.String())
		}
	}()

	var chats []string
	streams := map[string]string{}
	for i := range 3 {
		agent := fmt.Sprintf("frozen%d", i)
		var r chathost.Reply
		json.Unmarshal(c.command(agent, "chat", map[string]string{"text": "Tell me a story about a lighthouse."}), &r)
		chats, streams[agent] = append(chats, agent), r.StreamID
	}
	steppers := []string{"steps:frozen0", "steps:frozen1"}
	for _, a := range steppers {
		c.command(a, "start", map[string]int{"steps": 30, "delayMs": 100})
	}
	time.Sleep(700 * time.Millisecond) // not a synchronisation: the point, the fibers and chats run before the freeze
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * ttl) // not a synchronisation: the point, frozen longer than a lease TTL
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	for _, a := range chats {
		cs := waitTerminal(t, c, p, a, streams[a])
		if last := cs[len(cs)-1]; last.Type != chunk.Finish {
			t.Errorf("%s: turn ended with %+v", a, last)
		}
	}
	waitFibersDone(t, c, steppers)
	for _, a := range append(chats, steppers...) {
		if err := eventlog.CheckWriters(c.events(a)); err != nil {
			t.Errorf("%s: %v", a, err)
		}
	}
	select {
	case err := <-p.exited:
		t.Fatalf("agentd exited: %v", err)
	default:
	}
	verifyLog(t, c)
}
