package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"
)

// readyTimeout bounds one start of agentd.
const readyTimeout = 60 * time.Second

// daemon is the agentd under test: one process at a time, restarted on the
// same data dir and addresses.
type daemon struct {
	bin, data          string
	httpAddr, natsAddr string
	log                *os.File // every run's output, appended

	cmd    *exec.Cmd
	exited chan error
}

func newDaemon(bin, dir string) (*daemon, error) {
	httpAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	natsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	log, err := os.OpenFile(filepath.Join(dir, "agentd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &daemon{bin: bin, data: filepath.Join(dir, "data"), httpAddr: httpAddr, natsAddr: natsAddr, log: log}, nil
}

// start starts agentd and waits until /readyz answers 200; it returns the
// time that took.
func (d *daemon) start(ctx context.Context) (time.Duration, error) {
	fmt.Fprintf(d.log, "--- chaos: start %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(d.bin, "--data", d.data, "--http", d.httpAddr, "--nats-listen", d.natsAddr,
		"--log-format", "json", "--local-rate", "300",
		// Compact often, so kills land on compactions too and verify
		// reads snapshots.
		"--compact-events", "256", "--compact-every", "1s", "--compact-idle-events", "16", "--idle-timeout", "5s")
	cmd.Env = append(os.Environ(), "FOREVER_LOG_LEVEL=info")
	cmd.Stdout, cmd.Stderr = d.log, d.log
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	d.cmd, d.exited = cmd, make(chan error, 1)
	go func() { d.exited <- cmd.Wait() }()
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
			return 0, fmt.Errorf("agentd exited before ready: %v (log %s)", err, d.log.Name())
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("agentd not ready after %s (log %s)", readyTimeout, d.log.Name())
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
	fmt.Fprintf(d.log, "--- chaos: SIGSTOP for %s\n", dur)
	d.cmd.Process.Signal(syscall.SIGSTOP)
	select {
	case <-time.After(dur):
	case <-ctx.Done():
	}
	d.cmd.Process.Signal(syscall.SIGCONT)
}

// stop sends SIGTERM and waits for a clean exit.
func (d *daemon) stop() error {
	if d.cmd == nil {
		return nil
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.exited:
		d.cmd = nil
		if err != nil {
			return fmt.Errorf("agentd exit after SIGTERM: %w", err)
		}
		return nil
	case <-time.After(30 * time.Second):
		d.kill()
		return errors.New("agentd still running 30s after SIGTERM")
	}
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
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
