package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/internal/waitfor"
)

// testBinaryRollingUpgrade: a turn started by agentd --agent-version 1 is
// cut by a SIGKILL mid-stream; agentd --agent-version 2
// --version-policy fail recovers it and ends it with an error chunk that
// names both versions. Before the kill, status and agents --version 1
// show the running work of version 1; after the recovery, agents
// --version 1 lists nothing (version 1 has drained), and verify is clean.
func testBinaryRollingUpgrade(t *testing.T, bin string) {
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	start := func(args ...string) *agentdProc {
		p := &agentdProc{out: &agentdtest.SyncBuffer{}, exited: make(chan error, 1)}
		p.cmd = exec.Command(bin, append([]string{"--data", data, "--http", httpAddr, "--nats-listen", natsAddr, "--log-format", "json", "--local-rate", "40"}, args...)...)
		p.cmd.Env = os.Environ()
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
		return p
	}
	listed := func(version string) string {
		t.Helper()
		out, err := exec.Command(bin, "agents", "--version", version, "--server", "nats://"+natsAddr).CombinedOutput()
		if err != nil {
			t.Fatalf("agents --version %s: %v\n%s", version, err, out)
		}
		return string(out)
	}
	p := startWith(t, start("--agent-version", "1"), httpAddr)
	c := dialAgentd(t, natsAddr)
	const agent = "upgrade"
	var reply chathost.Reply
	json.Unmarshal(c.command(agent, "chat", map[string]string{"text": "Tell me a story about a lighthouse."}), &reply)
	if reply.StreamID == "" {
		t.Fatalf("chat reply %+v", reply)
	}
	waitfor.True(t, "the stream to grow to 10 chunks", func() bool { return len(c.streamChunks(agent, reply.StreamID)) >= 10 })
	var st host.Status
	json.Unmarshal(c.command(agent, "status", nil), &st)
	if st.Version != "1" || strings.Join(st.WorkVersions, ",") != "1" {
		t.Fatalf("status before the upgrade: version %q, work %v", st.Version, st.WorkVersions)
	}
	if out := listed("1"); !strings.Contains(out, agent) {
		t.Fatalf("agents --version 1 before the upgrade:\n%s", out)
	}
	p.kill()

	p = startWith(t, start("--agent-version", "2", "--version-policy", "fail"), httpAddr)
	chunks := waitTerminalFor(t, c, p, agent, reply.StreamID, 60*time.Second)
	last := chunks[len(chunks)-1]
	if last.Type != chunk.Error || !strings.Contains(last.ErrorText, `version "1"`) || !strings.Contains(last.ErrorText, `version "2"`) {
		t.Fatalf("stream ended with %+v", last)
	}
	waitfor.True(t, "version 1 to drain", func() bool { return !strings.Contains(listed("1"), agent) })
	st = host.Status{}
	json.Unmarshal(c.command(agent, "status", nil), &st)
	if st.Version != "2" || st.VersionPolicy != "fail" || len(st.WorkVersions) != 0 {
		t.Fatalf("status after the upgrade: %+v", st)
	}
	verifyLog(t, c)
	if t.Failed() {
		t.Logf("agentd output:\n%s", p.out.String())
	}
}
