package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/chat"
)

// TestMCPBinary runs agentd with an MCP server over stdio (the mcptools
// test server) and one that is down: agentd starts, a chat turn calls the
// server's tools by their <server>__<tool> names, the call's idempotency
// key reaches the server in _meta, an isError result is a tool error the
// model sees, and SIGTERM ends the server's process.
func TestMCPBinary(t *testing.T) {
	parallel(t, light, 70)
	bin := buildBinary(t)
	srvBin := filepath.Join(t.TempDir(), "mcpserver")
	if out, err := exec.Command("go", "build", "-o", srvBin, "../../../mcptools/testdata/mcpserver").CombinedOutput(); err != nil {
		t.Fatalf("go build mcpserver: %v\n%s", err, out)
	}
	record := filepath.Join(t.TempDir(), "record")
	down := "http://" + agentdtest.FreeAddr(t) + "/mcp"

	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	p := &agentdProc{out: &agentdtest.SyncBuffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(bin, "--data", data, "--http", httpAddr, "--nats-listen", natsAddr, "--log-format", "json",
		"--local-rate", "-1", "--mcp", "t="+srvBin+" -record "+record, "--mcp", "down="+down)
	p.cmd.Env = os.Environ()
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p = startWith(t, p, httpAddr)
	if out := p.out.String(); !strings.Contains(out, "unavailable at startup") || !strings.Contains(out, `"mcp_server":"down"`) {
		t.Errorf("no startup warning for the server that is down:\n%s", out)
	}

	c := dialAgentd(t, natsAddr)
	const agent = "mcp"
	prompt := "/tool t__echo {\"text\":\"hi\"}\n/tool t__record {}\n/tool t__fail {\"text\":\"x\"}"
	var reply chathost.Reply
	json.Unmarshal(c.command(agent, "chat", map[string]string{"text": prompt}), &reply)
	if reply.StreamID == "" {
		t.Fatalf("chat reply %+v", reply)
	}
	waitTerminal(t, c, p, agent, reply.StreamID)
	var page struct{ Messages []chat.Message }
	json.Unmarshal(c.command(agent, "messages", nil), &page)
	if len(page.Messages) != 2 {
		t.Fatalf("history = %+v, want the user message and one assistant message", page.Messages)
	}
	var calls []chat.Part
	for _, part := range page.Messages[1].Parts {
		if part.Type == chat.PartTool {
			calls = append(calls, part)
		}
	}
	if len(calls) != 3 {
		t.Fatalf("tool parts = %+v, want echo, record and fail\n%s", calls, p.out.String())
	}
	if echo := calls[0]; echo.ToolName != "t__echo" || echo.State != chat.ToolOutput || string(echo.Output) != `"hi"` {
		t.Errorf("echo part %+v", echo)
	}
	rec := calls[1]
	var out struct{ Key string }
	json.Unmarshal(rec.Output, &out)
	wantKey := chat.ToolIdempotencyKey(agent, reply.RequestID, rec.ToolCallID)
	if rec.ToolName != "t__record" || rec.State != chat.ToolOutput || out.Key != wantKey {
		t.Errorf("record part %+v, want output with key %s", rec, wantKey)
	}
	if got := mcpRecords(t, record, "record"); !slices.Equal(got, []string{wantKey}) {
		t.Errorf("the server recorded keys %q, want [%s]", got, wantKey)
	}
	if fail := calls[2]; fail.ToolName != "t__fail" || fail.State != chat.ToolOutputError || !strings.Contains(fail.ErrorText, "boom: x") {
		t.Errorf("fail part %+v, want an output error with the server's text", fail)
	}

	starts := mcpRecords(t, record, "start")
	if len(starts) != 1 {
		t.Fatalf("server started %d times, want once", len(starts))
	}
	pid, _ := strconv.Atoi(starts[0])
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		p.exited <- err
		if err != nil {
			t.Fatalf("agentd exit: %v\n%s", err, p.out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("agentd still running 30s after SIGTERM:\n%s", p.out.String())
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("MCP server process %d after agentd exited: %v, want it gone", pid, err)
	}
}

// mcpRecords returns the lines of the test server's record file that
// start with kind.
func mcpRecords(t *testing.T, record, kind string) []string {
	t.Helper()
	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), kind+" "); ok {
			got = append(got, rest)
		}
	}
	return got
}
