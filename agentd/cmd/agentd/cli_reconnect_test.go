package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/waitfor"
)

// lostNotice is how soon after losing agentd the CLI must say so.
const lostNotice = 2 * time.Second

// cliRun is the CLI run as a process, its output kept.
type cliRun struct {
	cmd      *exec.Cmd
	out, err *agentdtest.SyncBuffer
	done     chan error
}

func startCLI(t *testing.T, bin string, args ...string) *cliRun {
	t.Helper()
	r := &cliRun{cmd: exec.Command(bin, args...), out: &agentdtest.SyncBuffer{}, err: &agentdtest.SyncBuffer{}, done: make(chan error, 1)}
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.err
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.cmd.Process.Kill() })
	go func() { r.done <- r.cmd.Wait() }()
	return r
}

// waitOutput waits until the run's stdout or stderr holds want.
func (r *cliRun) waitOutput(t *testing.T, stderr bool, want string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	buf := r.out
	if stderr {
		buf = r.err
	}
	waitfor.Within(t, within, func() error {
		if strings.Contains(buf.String(), want) {
			return nil
		}
		return fmt.Errorf("no %q; stdout:\n%s\nstderr:\n%s", want, r.out.String(), r.err.String())
	})
	return time.Since(start)
}

// exit waits for the run to end (within d) and returns its exit code.
func (r *cliRun) exit(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case err := <-r.done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		return 0
	case <-time.After(d):
		t.Fatalf("the CLI still runs after %s; stdout:\n%s\nstderr:\n%s", d, r.out.String(), r.err.String())
		return -1
	}
}

// testBinaryCLIReconnect: agentd chat and agentd tail never hang in
// silence. With agentd down, chat fails at once naming the URL. When
// agentd is killed while they follow a reply, both say "connection lost,
// reconnecting (cursor N)" within 2 s, resume by themselves once agentd is
// back, and print the whole reply once; without agentd they give up after
// --wait with exit 1 and the cursor to resume from.
func testBinaryCLIReconnect(t *testing.T, bin string) {
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	url := "nats://" + natsAddr

	// Down: an error, at once.
	down := startCLI(t, bin, "chat", "r0", "hello", "--nats-url", url)
	if code := down.exit(t, 10*time.Second); code != 1 || !strings.Contains(down.err.String(), "connect to NATS at "+url) {
		t.Errorf("chat with agentd down: exit %d, stderr %q; want 1 naming the URL", code, down.err.String())
	}

	args := []string{"--local-rate", "15"}
	p := startAgentd(t, bin, data, httpAddr, natsAddr, args...)
	chat := startCLI(t, bin, "chat", "r1", "Tell me a long story about a lighthouse keeper.", "--nats-url", url, "--wait", "60s")
	chat.waitOutput(t, false, " ", 30*time.Second)
	time.Sleep(time.Second) // not a synchronisation: the point, the chat's stream runs on so tail starts mid-stream
	tail := startCLI(t, bin, "tail", "r1", "--nats-url", url, "--wait", "60s")
	tail.waitOutput(t, false, " ", 30*time.Second)
	p.kill()
	for name, r := range map[string]*cliRun{"chat": chat, "tail": tail} {
		took := r.waitOutput(t, true, "connection lost, reconnecting (cursor ", lostNotice)
		t.Logf("%s said the connection was lost %s after the kill: %s", name, took.Round(time.Millisecond), strings.TrimSpace(r.err.String()))
	}
	time.Sleep(time.Second) // not a synchronisation: the point, agentd stays down a while so both clients retry
	p = startAgentd(t, bin, data, httpAddr, natsAddr, args...)
	c := dialAgentd(t, natsAddr)
	for name, r := range map[string]*cliRun{"chat": chat, "tail": tail} {
		if code := r.exit(t, 90*time.Second); code != 0 {
			t.Errorf("%s after agentd came back: exit %d\nstderr:\n%s", name, code, r.err.String())
		}
	}
	last, ok, err := c.lg.Last(t.Context(), eventlog.Filter{Agent: "r1", Chunks: true})
	if err != nil || !ok {
		t.Fatalf("last chunk of r1: %v %v", ok, err)
	}
	want := textOf(c.streamChunks("r1", last.Stream))
	for name, r := range map[string]*cliRun{"chat": chat, "tail": tail} {
		if got := strings.TrimSpace(r.out.String()); got != strings.TrimSpace(want) {
			t.Errorf("%s printed:\n%q\nthe stream holds:\n%q", name, got, want)
		}
	}

	// Stopped (SIGSTOP): the pings notice it as soon.
	var r2 chathost.Reply
	json.Unmarshal(c.command("r2", "chat", map[string]string{"text": "Tell me a long story about a lighthouse keeper."}), &r2)
	stopped := startCLI(t, bin, "tail", "r2", "--nats-url", url, "--wait", "60s")
	stopped.waitOutput(t, false, " ", 30*time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	took := stopped.waitOutput(t, true, "connection lost, reconnecting (cursor ", lostNotice)
	t.Logf("tail said the connection was lost %s after SIGSTOP", took.Round(time.Millisecond))
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := stopped.exit(t, 90*time.Second); code != 0 {
		t.Errorf("tail after SIGCONT: exit %d\nstderr:\n%s", code, stopped.err.String())
	}

	// Gone for good: give up after --wait.
	var r3 chathost.Reply
	json.Unmarshal(c.command("r3", "chat", map[string]string{"text": "Tell me a long story about a lighthouse keeper."}), &r3)
	gone := startCLI(t, bin, "tail", "r3", "--nats-url", url, "--wait", "3s")
	gone.waitOutput(t, false, " ", 30*time.Second)
	p.kill()
	killed := time.Now()
	code := gone.exit(t, 30*time.Second)
	t.Logf("tail gave up %s after the kill: exit %d: %s", time.Since(killed).Round(time.Millisecond), code, strings.TrimSpace(gone.err.String()))
	if code != 1 || !strings.Contains(gone.err.String(), "gave up") || !strings.Contains(gone.err.String(), "--from ") {
		t.Errorf("tail without agentd: exit %d, stderr %q; want exit 1 giving up with the cursor", code, gone.err.String())
	}
}
