package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/agentd/demo"
	"github.com/forever-agents/forever/eventlog"
)

// TestBinaryShards: agentd started with --shards 4 keeps each partition's
// events and chunks in its shard's streams, chats on many agents there,
// and verify (over NATS, then on the stopped data dir) finds the log
// clean; agentd cluster shows the shards; a restart with another count
// is refused, naming the flag, and with the same count serves the same
// history.
func TestBinaryShards(t *testing.T) {
	parallel(t, light, 30)
	bin := buildBinary(t)
	data := t.TempDir()
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	flags := []string{"--shards", "4", "--partitions", "8"}
	p := startAgentd(t, bin, data, httpAddr, natsAddr, flags...)
	c := dialShards(t, natsAddr)
	if got := c.lg.Shards(); got != 4 {
		t.Fatalf("the log binds %d shards, want 4", got)
	}
	var agents []string
	streams := map[string]string{}
	shards := map[int]bool{}
	for i := range 16 {
		a := fmt.Sprintf("chat%d", i)
		agents = append(agents, a)
		shards[eventlog.PartitionOf(a, 8)%4] = true
		var reply chathost.Reply
		if err := json.Unmarshal(c.command(a, "chat", map[string]string{"text": "hello " + a}), &reply); err != nil || reply.StreamID == "" {
			t.Fatalf("chat %s: %+v, %v", a, reply, err)
		}
		streams[a] = reply.StreamID
	}
	if len(shards) != 4 {
		t.Fatalf("16 agents in shards %v, want all 4", shards)
	}
	var started struct{ Fiber string }
	json.Unmarshal(c.command("steps:s", "start", demo.StepsStart{Steps: 3, DelayMS: 10}), &started)
	for _, a := range agents {
		waitTerminal(t, c, p, a, streams[a])
	}
	c.waitFor("the steps fiber to complete", []string{"steps:s"}, func(evs []eventlog.Event) bool {
		return count(evs, "fiber.completed", started.Fiber) == 1
	})
	for _, a := range append(agents, "steps:s") {
		evs := c.events(a)
		want := fmt.Sprintf("forever.evt.%d.%s", eventlog.PartitionOf(a, 8), a)
		if len(evs) == 0 || evs[0].Subject != want {
			t.Fatalf("events of %s: %d, first on %q, want on %q", a, len(evs), subjectOf(evs), want)
		}
		if k, _ := eventlog.ShardOf(evs[0].Seq); k != eventlog.PartitionOf(a, 8)%4 {
			t.Errorf("events of %s carry shard %d", a, k)
		}
	}
	verifyLog(t, c)
	out, code := runVerifyCmd(t, bin, "verify", "--nats-url", "nats://"+natsAddr)
	if code != 0 || !strings.HasPrefix(lastLine(out), "ok: 17 agents") {
		t.Errorf("verify --nats-url: exit %d\n%s", code, out)
	}
	out, code = runVerifyCmd(t, bin, "cluster", "--nats-url", "nats://"+natsAddr)
	if code != 0 || !strings.Contains(out, "4 stream shards") || !strings.Contains(out, "FOREVER_EVENTS_3") || !strings.Contains(out, "FOREVER_CHUNKS_0") ||
		!strings.Contains(out, fmt.Sprintf("record format %d active", agentd.RecordFormat)) {
		t.Errorf("agentd cluster: exit %d\n%s", code, out)
	}

	stop := func() {
		t.Helper()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := <-p.exited; err != nil {
			t.Fatalf("agentd exit: %v\n%s", err, p.out.String())
		}
		p.exited <- nil
	}
	stop()
	out, code = runVerifyCmd(t, bin, "verify", "--data", data)
	if code != 0 || !strings.HasPrefix(lastLine(out), "ok: 17 agents") {
		t.Errorf("verify --data: exit %d\n%s", code, out)
	}
	// Without --shards a node takes the cluster's count (TestBinary/ShardsMove).
	for _, other := range [][]string{{"--shards", "2", "--partitions", "8"}, {"--shards", "1", "--partitions", "8"}} {
		out, code := runVerifyCmd(t, bin, append([]string{"--data", data, "--http", httpAddr, "--nats-listen", natsAddr}, other...)...)
		if code == 0 || !strings.Contains(out, "--shards") || !strings.Contains(out, "4 shards") {
			t.Errorf("restart with %v: exit %d\n%s", other, code, out)
		}
	}
	p = startAgentd(t, bin, data, httpAddr, natsAddr, flags...)
	c = dialShards(t, natsAddr)
	var reply chathost.Reply
	if err := json.Unmarshal(c.command(agents[3], "chat", map[string]string{"text": "again"}), &reply); err != nil {
		t.Fatal(err)
	}
	waitTerminal(t, c, p, agents[3], reply.StreamID)
	verifyLog(t, c)
	stop()
}

// dialShards connects to agentd over NATS with a client that binds its
// streams, as a client of a sharded log must (it learns the shards).
func dialShards(t *testing.T, natsAddr string) *crashClient {
	t.Helper()
	nc, err := nats.Connect("nats://"+natsAddr, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	lg, err := eventlog.Open(t.Context(), eventlog.Config{Conn: nc, Bind: true})
	if err != nil {
		t.Fatal(err)
	}
	return &crashClient{t: t, nc: nc, lg: lg}
}

func subjectOf(evs []eventlog.Event) string {
	if len(evs) == 0 {
		return ""
	}
	return evs[0].Subject
}
