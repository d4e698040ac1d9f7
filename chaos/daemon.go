package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/forever-agents/forever/internal/freeport"
)

// readyTimeout bounds one start of agentd.
const readyTimeout = 90 * time.Second

// tuning are the flags chaos adds to every agentd it starts: the local
// model streams fast, and agents compact often, so kills land on
// compactions too and verify reads snapshots.
var tuning = []string{
	"--local-rate=300",
	"--compact-events=256", "--compact-every=1s", "--compact-idle-events=16", "--idle-timeout=5s",
}

// daemon is one agentd node under test: one process at a time, restarted
// on the same data dir, addresses, flags and environment.
type daemon struct {
	name               string
	bin, data          string
	httpAddr, natsAddr string
	args, env          []string // env is added to chaos's own
	log                *os.File // every run's output, appended

	cmd    *exec.Cmd
	exited chan error
}

// start starts agentd and waits until /readyz answers 200; it returns the
// time that took.
func (d *daemon) start(ctx context.Context) (time.Duration, error) {
	began, err := d.spawn()
	if err != nil {
		return 0, err
	}
	return d.waitReady(ctx, began)
}

// spawn starts the process without waiting for it to be ready.
func (d *daemon) spawn() (time.Time, error) {
	fmt.Fprintf(d.log, "--- chaos: start %s: %s %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(d.env, " "), strings.Join(d.args, " "))
	cmd := exec.Command(d.bin, d.args...)
	cmd.Env = append(os.Environ(), d.env...)
	cmd.Stdout, cmd.Stderr = d.log, d.log
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return began, err
	}
	d.cmd, d.exited = cmd, make(chan error, 1)
	go func() { d.exited <- cmd.Wait() }()
	return began, nil
}

// waitReady waits until /readyz answers 200 (which, clustered, includes the
// node's JetStream replicas being current) and returns the time since
// began.
func (d *daemon) waitReady(ctx context.Context, began time.Time) (time.Duration, error) {
	deadline := began.Add(readyTimeout)
	client := &http.Client{Timeout: time.Second}
	for {
		if resp, err := client.Get("http://" + d.httpAddr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(began), nil
			}
		}
		select {
		case err := <-d.exited:
			d.exited <- err
			return 0, fmt.Errorf("%s exited before ready: %v (log %s)", d.name, err, d.log.Name())
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s not ready after %s (log %s)", d.name, readyTimeout, d.log.Name())
		}
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (d *daemon) kill() {
	if d.cmd == nil {
		return
	}
	fmt.Fprintf(d.log, "--- chaos: SIGKILL %s\n", time.Now().Format(time.RFC3339Nano))
	d.cmd.Process.Signal(syscall.SIGKILL)
	err := <-d.exited
	d.exited <- err
	d.cmd = nil
}

// freeze stops the process with SIGSTOP for dur, then continues it.
func (d *daemon) freeze(ctx context.Context, dur time.Duration) {
	fmt.Fprintf(d.log, "--- chaos: SIGSTOP for %s %s\n", dur, time.Now().Format(time.RFC3339Nano))
	d.cmd.Process.Signal(syscall.SIGSTOP)
	select {
	case <-time.After(dur):
	case <-ctx.Done():
	}
	d.cmd.Process.Signal(syscall.SIGCONT)
	fmt.Fprintf(d.log, "--- chaos: SIGCONT %s\n", time.Now().Format(time.RFC3339Nano))
}

// stop sends SIGTERM and waits for a clean exit.
func (d *daemon) stop() error {
	if d.cmd == nil {
		return nil
	}
	d.terminate()
	return d.waitExit(30 * time.Second)
}

// terminate sends SIGTERM, the orderly stop: a node of a cluster hands
// off its partitions on its way out.
func (d *daemon) terminate() {
	fmt.Fprintf(d.log, "--- chaos: SIGTERM %s\n", time.Now().Format(time.RFC3339Nano))
	d.cmd.Process.Signal(syscall.SIGTERM)
}

// waitExit waits up to timeout for the process to exit after terminate,
// and kills it past that; an exit status other than 0 is an error.
func (d *daemon) waitExit(timeout time.Duration) error {
	select {
	case err := <-d.exited:
		d.cmd = nil
		if err != nil {
			return fmt.Errorf("%s exit after SIGTERM: %w", d.name, err)
		}
		return nil
	case <-time.After(timeout):
		d.kill()
		return fmt.Errorf("%s still running %s after SIGTERM", d.name, timeout)
	}
}

// url is the node's NATS client URL.
func (d *daemon) url() string { return "nats://" + d.natsAddr }

// freeAddr returns a loopback address whose port stays reserved for this
// run (internal/freeport): the daemons restart on it many times.
func freeAddr() (string, error) {
	addr, _, err := freeport.Reserve()
	return addr, err
}

// freeAddrs returns n addresses of freeAddr.
func freeAddrs(n int) ([]string, error) {
	var out []string
	for range n {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// buildAgentd builds ./agentd/cmd/agentd into dir.
func buildAgentd(ctx context.Context, dir string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(dir, "agentd")
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", bin, "github.com/forever-agents/forever/agentd/cmd/agentd")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build agentd: %v\n%s", err, out)
	}
	return bin, nil
}
