package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/agentd/demo"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/keepalive"
)

// testBinaryShardsMove: agents of an unsharded node (chats, a fork, a
// finished and a running steps fiber, a schedule) are moved into 4 shards
// by "agentd shards move" on the stopped data dir: the move is refused
// while the node runs; after it the node refuses to start with --shards
// 1, and without --shards takes the 4 shards, where every agent's history, messages, fibers and
// schedules are what they were, each agent's events in its shard; the
// running fiber resumes and completes, a chat resumes, and verify is
// clean. A backup of the moved node restores, into a new data dir, every
// shard, and the restored node refuses to start with another count.
func testBinaryShardsMove(t *testing.T, bin string) {
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	url := "nats://" + natsAddr
	p := startAgentd(t, bin, data, httpAddr, natsAddr, "--partitions", "8")
	c := dialAgentd(t, natsAddr)
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

	var chats []string
	for i := range 8 {
		a := fmt.Sprintf("mv%d", i)
		chats = append(chats, a)
		for _, text := range []string{"hello " + a, "and again"} {
			var reply chathost.Reply
			if err := json.Unmarshal(c.command(a, "chat", map[string]string{"text": text}), &reply); err != nil || reply.StreamID == "" {
				t.Fatalf("chat %s: %+v, %v", a, reply, err)
			}
			waitTerminal(t, c, p, a, reply.StreamID)
		}
	}
	runAgentdCLI(t, bin, "fork", chats[0], "--to", "mvfork", "--nats-url", url)
	c.command("steps:done", "start", demo.StepsStart{Steps: 3, DelayMS: 10})
	waitFibersDone(t, c, []string{"steps:done"})
	now := time.Now().UTC()
	sched, err := eventlog.NewEvent("steps:sched", keepalive.EventSet, keepalive.Schedule{
		ID: "nightly", Agent: "steps:sched", Callback: "remind", Kind: keepalive.KindAt,
		At: now.Add(24 * time.Hour), NextAt: now.Add(24 * time.Hour), CreatedAt: now,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.lg.Append(t.Context(), sched); err != nil {
		t.Fatal(err)
	}
	agents := append(append([]string{}, chats...), "mvfork", "steps:done", "steps:sched")
	want := map[string]agentView{}
	history := map[string][]string{}
	c.waitFor("the schedule in the view", nil, func([]eventlog.Event) bool {
		return strings.Contains(viewOf(c, "steps:sched").Schedules, "nightly")
	})
	for _, a := range agents {
		want[a] = viewOf(c, a)
		for _, e := range c.events(a) {
			history[a] = append(history[a], e.Type+" "+e.ID)
		}
	}
	var started struct{ Fiber string }
	json.Unmarshal(c.command("steps:run", "start", demo.StepsStart{Steps: 60, DelayMS: 50}), &started)
	c.waitFor("the running fiber's first steps", []string{"steps:run"}, func(evs []eventlog.Event) bool {
		return count(evs, demo.EventStepExecuted, started.Fiber) >= 3
	})

	out, code := runVerifyCmd(t, bin, "shards", "move", "--shards", "4", "--nats-url", url)
	if code != 1 || !strings.Contains(out, "running") || !strings.Contains(out, "stop every node") {
		t.Errorf("move while the node runs: exit %d\n%s", code, out)
	}
	stop()
	out, code = runVerifyCmd(t, bin, "shards", "move", "--shards", "3", "--data", data)
	if code != 1 || !strings.Contains(out, "--partitions must be a multiple of --shards") {
		t.Errorf("move into 3 shards of 8 partitions: exit %d\n%s", code, out)
	}
	out = runAgentdCLI(t, bin, "shards", "move", "--shards", "4", "--data", data)
	if !strings.Contains(out, "moved 12 agents into 4 shards of 8 partitions") || !strings.Contains(out, "--shards 4") {
		t.Errorf("move printed:\n%s", out)
	}
	out, code = runVerifyCmd(t, bin, "--data", data, "--http", httpAddr, "--nats-listen", natsAddr, "--partitions", "8", "--shards", "1")
	if code == 0 || !strings.Contains(out, "--shards") || !strings.Contains(out, "4 shards") {
		t.Errorf("restart with --shards 1 after the move: exit %d\n%s", code, out)
	}

	// Restarted with its usual flags (no --shards): it takes the 4 shards.
	p = startAgentd(t, bin, data, httpAddr, natsAddr, "--partitions", "8")
	c = dialShards(t, natsAddr)
	if c.lg.Shards() != 4 {
		t.Fatalf("the log binds %d shards after the move", c.lg.Shards())
	}
	for _, a := range agents {
		if got := viewOf(c, a); got != want[a] {
			t.Errorf("%s after the move:\n%+v\nwant\n%+v", a, got, want[a])
		}
		var got []string
		evs := c.events(a)
		for _, e := range evs {
			got = append(got, e.Type+" "+e.ID)
			if k, _ := eventlog.ShardOf(e.Seq); k != eventlog.PartitionOf(a, 8)%4 {
				t.Errorf("%s's %s is in shard %d", a, e.Type, k)
			}
		}
		if strings.Join(got, "\n") != strings.Join(history[a], "\n") {
			t.Errorf("%s's events after the move:\n%s\nwant\n%s", a, strings.Join(got, "\n"), strings.Join(history[a], "\n"))
		}
	}
	c.waitFor("the running fiber to complete after the move", []string{"steps:run"}, func(evs []eventlog.Event) bool {
		return count(evs, "fiber.completed", started.Fiber) == 1
	})
	var reply chathost.Reply
	if err := json.Unmarshal(c.command(chats[1], "chat", map[string]string{"text": "after the move"}), &reply); err != nil || reply.StreamID == "" {
		t.Fatalf("chat after the move: %+v, %v", reply, err)
	}
	waitTerminal(t, c, p, chats[1], reply.StreamID)
	if got := viewOf(c, chats[1]).Messages; got == want[chats[1]].Messages || !strings.Contains(got, "after the move") {
		t.Errorf("messages of %s after a chat after the move:\n%s", chats[1], got)
	}
	verifyLog(t, c)
	out, code = runVerifyCmd(t, bin, "verify", "--nats-url", url)
	if code != 0 || !strings.HasPrefix(lastLine(out), "ok: 12 agents") {
		t.Errorf("verify --nats-url after the move: exit %d\n%s", code, out)
	}
	// A backup of the sharded node holds every shard stream, and its
	// restore into a new data dir records the shards.
	bk := filepath.Join(t.TempDir(), "bk")
	runAgentdCLI(t, bin, "backup", "--out", bk, "--nats-url", url)
	wantAfter := viewOf(c, chats[1])
	stop()
	out = runAgentdCLI(t, bin, "shards", "move", "--shards", "4", "--data", data)
	if !strings.Contains(out, "already moved into 4 shards") {
		t.Errorf("a second move printed:\n%s", out)
	}
	restored := filepath.Join(t.TempDir(), "restored")
	out = runAgentdCLI(t, bin, "restore", "--from", bk, "--data", restored, "--allow-unsigned")
	for k := range 4 {
		if !strings.Contains(out, fmt.Sprintf(`"FOREVER_EVENTS_%d"`, k)) || !strings.Contains(out, fmt.Sprintf(`"FOREVER_CHUNKS_%d"`, k)) {
			t.Errorf("the restore of the sharded backup misses shard %d:\n%s", k, out)
		}
	}
	out, code = runVerifyCmd(t, bin, "--data", restored, "--http", httpAddr, "--nats-listen", natsAddr, "--partitions", "8", "--shards", "2")
	if code == 0 || !strings.Contains(out, "4 shards") {
		t.Errorf("start with --shards 2 on the restored backup: exit %d\n%s", code, out)
	}
	p = startAgentd(t, bin, restored, httpAddr, natsAddr, "--partitions", "8", "--shards", "4")
	c = dialShards(t, natsAddr)
	if got := viewOf(c, chats[1]); got != wantAfter {
		t.Errorf("%s restored from the sharded backup:\n%+v\nwant\n%+v", chats[1], got, wantAfter)
	}
	out, code = runVerifyCmd(t, bin, "verify", "--nats-url", url)
	if code != 0 || !strings.HasPrefix(lastLine(out), "ok: 12 agents") {
		t.Errorf("verify after restoring the sharded backup: exit %d\n%s", code, out)
	}
	stop()
}
