package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/agentd/demo"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/verify"
)

// verifyLog checks the log of the agentd c is connected to against the
// invariants of package verify and fails the test on any violation.
func verifyLog(t *testing.T, c *crashClient) {
	t.Helper()
	var rep verify.Report
	var err error
	for range 50 { // the server may be restarting, or electing a leader
		if rep, err = verify.Check(t.Context(), c.lg, verify.Options{}); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond) // not a synchronisation: a retry's backoff
	}
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if !rep.OK() {
		t.Errorf("the log breaks its invariants:\n%s", rep)
	}
}

// TestBinaryVerify: "agentd verify --data" checks a stopped agentd's data
// dir (two chat turns, one with a large tool output stored by reference,
// and a steps fiber across a SIGKILL and a restart) and
// exits 0; it refuses the data dir of a running agentd; "agentd verify"
// over NATS checks the running one.
func TestBinaryVerify(t *testing.T) {
	parallel(t, light, 55)
	bin := buildBinary(t)
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	p := startAgentd(t, bin, data, httpAddr, natsAddr)
	c := dialAgentd(t, natsAddr)
	var reply chathost.Reply
	json.Unmarshal(c.command("demo", "chat", map[string]string{"text": "/tool clock {}"}), &reply)
	var started struct{ Fiber string }
	json.Unmarshal(c.command("steps:v", "start", demo.StepsStart{Steps: 4, DelayMS: 100}), &started)
	if reply.RequestID == "" || started.Fiber == "" {
		t.Fatalf("chat reply %+v, start reply %+v", reply, started)
	}
	// A tool output over --blob-threshold, stored by reference, across
	// the same SIGKILL (blob_test.go).
	blobReply := startBlobTurn(t, c)
	// Mid-call: the blob call's input is complete (a kill before would
	// end the call unrun, by design), its output not yet stored.
	waitBlobCall(t, c, p, blobReply)
	p.kill()
	p = startAgentd(t, bin, data, httpAddr, natsAddr)
	c.waitFor("the steps fiber to complete", []string{"steps:v"}, func(evs []eventlog.Event) bool {
		return count(evs, "fiber.completed", started.Fiber) == 1
	})
	waitTerminal(t, c, p, "demo", reply.StreamID)
	checkBlobTurn(t, c, p, httpAddr, blobReply)

	// Over NATS, while it runs.
	out, code := runVerifyCmd(t, bin, "verify", "--nats-url", "nats://"+natsAddr)
	if code != 0 || !strings.HasPrefix(lastLine(out), "ok: 3 agents") || !strings.Contains(out, "payloads stored by reference checked") {
		t.Errorf("verify --nats-url: exit %d\n%s", code, out)
	}
	t.Run("Fork", func(t *testing.T) { testBinaryFork(t, bin, c, p, httpAddr, natsAddr) })

	// --data is refused while agentd holds the data dir.
	if out, code := runVerifyCmd(t, bin, "verify", "--data", data); code != 1 || !strings.Contains(out, "agentd is running on") {
		t.Errorf("verify --data of a running agentd: exit %d\n%s", code, out)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-p.exited; err != nil {
		t.Fatalf("agentd exit: %v\n%s", err, p.out.String())
	}
	p.exited <- nil
	out, code = runVerifyCmd(t, bin, "verify", "--data", data)
	// The agents: demo, steps:v, the blob turn's, and Fork's fork-child
	// and deleted fork-parent (its tombstone); the turns and streams:
	// demo's, the blob turn's and fork-child's own.
	if code != 0 || !strings.HasPrefix(lastLine(out), "ok: 5 agents") || !strings.Contains(out, "3 fibers, 3 turns, 3 streams") ||
		!strings.Contains(out, "payloads stored by reference checked") {
		t.Errorf("verify --data: exit %d\n%s", code, out)
	}

	if _, code := runVerifyCmd(t, bin, "verify", "--data", data, "--nats-url", "nats://"+natsAddr); code != 2 {
		t.Errorf("verify with both --data and --nats-url: exit %d, want 2", code)
	}
	if out, code := runVerifyCmd(t, bin, "verify", "--data", t.TempDir()); code != 1 || !strings.Contains(out, "no JetStream store") {
		t.Errorf("verify --data of an empty dir: exit %d\n%s", code, out)
	}

	// The views rebuilt from an empty Pebble: the blob turn reads back
	// whole, and verify is clean.
	if err := os.RemoveAll(filepath.Join(data, "pebble")); err != nil {
		t.Fatal(err)
	}
	p = startAgentd(t, bin, data, httpAddr, natsAddr)
	c = dialAgentd(t, natsAddr)
	checkBlobTurn(t, c, p, httpAddr, blobReply)
	verifyLog(t, c)
	if out, code := runVerifyCmd(t, bin, "verify", "--nats-url", "nats://"+natsAddr); code != 0 || !strings.Contains(out, "payloads stored by reference checked") {
		t.Errorf("verify --nats-url after the rebuild: exit %d\n%s", code, out)
	}
}

// runVerifyCmd runs bin with args and returns its output and exit code.
func runVerifyCmd(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Env = os.Environ()
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	}
	t.Fatalf("%s %v: %v", bin, args, err)
	return "", 0
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
