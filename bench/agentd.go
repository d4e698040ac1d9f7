package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/forever-agents/forever/internal/freeport"
	"github.com/nats-io/nats.go"
)

// agentdReadyTimeout bounds one start of agentd, until /readyz answers 200.
const agentdReadyTimeout = 5 * time.Minute

// agentdBuild builds the agentd binary once per run, on first use, for the
// scenarios that measure the real process. run creates it and removes its
// dir when the run ends; an Env without one builds its own under its temp
// dir.
type agentdBuild struct {
	dir  string
	once sync.Once
	bin  string
	err  error
}

// binary returns the path of the built agentd, building it on the first
// call (go build ./agentd/cmd/agentd, from the module the bench runs in).
func (b *agentdBuild) binary(ctx context.Context) (string, error) {
	b.once.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		bin := filepath.Join(b.dir, "agentd")
		cmd := exec.CommandContext(ctx, goBin, "build", "-o", bin, "github.com/forever-agents/forever/agentd/cmd/agentd")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("bench: go build agentd: %v\n%s", err, out)
			return
		}
		b.bin = bin
	})
	return b.bin, b.err
}

// agentdProc is one agentd on one data dir and fixed addresses, started
// and stopped as a real process any number of times, one at a time.
type agentdProc struct {
	bin, data          string
	httpAddr, natsAddr string
	args               []string // extra flags
	logPath            string   // every run's output, appended

	cmd    *exec.Cmd
	exited chan error
	log    *os.File
}

// newAgentdProc prepares an agentd storing under dir/data, logging to
// dir/agentd.log, on free loopback ports, with --sync mode and extra args.
func newAgentdProc(bin, dir string, mode SyncMode, args ...string) (*agentdProc, error) {
	httpAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	natsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	return &agentdProc{
		bin: bin, data: filepath.Join(dir, "data"), httpAddr: httpAddr, natsAddr: natsAddr,
		args:    append([]string{"--sync", string(mode)}, args...),
		logPath: filepath.Join(dir, "agentd.log"),
	}, nil
}

// start starts agentd and waits until GET /readyz answers 200; it returns
// the time from starting the process until then.
func (p *agentdProc) start(ctx context.Context) (time.Duration, error) {
	if p.cmd != nil {
		return 0, errors.New("bench: agentd already running")
	}
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, fmt.Errorf("bench: %w", err)
	}
	fmt.Fprintf(log, "--- bench: start %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, append([]string{"--data", p.data, "--http", p.httpAddr, "--nats-listen", p.natsAddr}, p.args...)...)
	cmd.Env = agentdEnv()
	cmd.Stdout, cmd.Stderr = log, log
	client := &http.Client{Timeout: time.Second}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		log.Close()
		return 0, fmt.Errorf("bench: start agentd: %w", err)
	}
	p.cmd, p.exited, p.log = cmd, make(chan error, 1), log
	go func() { p.exited <- cmd.Wait() }()
	deadline := began.Add(agentdReadyTimeout)
	for {
		if resp, err := client.Get("http://" + p.httpAddr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(began), nil
			}
		}
		select {
		case err := <-p.exited:
			p.exited <- err
			p.reap()
			return 0, fmt.Errorf("bench: agentd exited before ready: %v\n%s", err, p.tail())
		case <-ctx.Done():
			p.kill()
			return 0, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.kill()
			return 0, fmt.Errorf("bench: agentd not ready after %s\n%s", agentdReadyTimeout, p.tail())
		}
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (p *agentdProc) stop() error {
	if p.cmd == nil {
		return nil
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		p.reap()
		if err != nil {
			return fmt.Errorf("bench: agentd exit after SIGTERM: %w\n%s", err, p.tail())
		}
		return nil
	case <-time.After(60 * time.Second):
		p.kill()
		return errors.New("bench: agentd still running 60s after SIGTERM")
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *agentdProc) kill() {
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	p.reap()
}

func (p *agentdProc) reap() {
	p.cmd = nil
	p.log.Close()
}

// connect dials the embedded NATS server of the running agentd.
func (p *agentdProc) connect() (*nats.Conn, error) {
	nc, err := nats.Connect("nats://"+p.natsAddr, nats.Name("bench"))
	if err != nil {
		return nil, fmt.Errorf("bench: connect to agentd: %w", err)
	}
	return nc, nil
}

// tail returns the last lines of the log, for errors.
func (p *agentdProc) tail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	lines = lines[max(0, len(lines)-20):]
	return "agentd log " + p.logPath + ":\n" + string(bytes.Join(lines, []byte("\n")))
}

// agentdEnv is the bench's environment without FOREVER_* variables, so
// that only the flags configure the agentd under test.
func agentdEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FOREVER_") {
			env = append(env, kv)
		}
	}
	return env
}

// freeAddr returns a loopback address whose port stays reserved while the
// bench runs (internal/freeport): a daemon restarts on it.
func freeAddr() (string, error) {
	addr, _, err := freeport.Reserve()
	if err != nil {
		return "", fmt.Errorf("bench: pick a port: %w", err)
	}
	return addr, nil
}

// runAgentd builds agentd (once per run), starts one in a new temp dir
// under the Env's sync mode with args, and connects to it. stop stops the
// connection and the process; its error is the process's.
func (e *Env) runAgentd(ctx context.Context, args ...string) (p *agentdProc, nc *nats.Conn, stop func() error, err error) {
	bin, err := e.AgentdBinary(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	dir, err := e.TempDir()
	if err != nil {
		return nil, nil, nil, err
	}
	if p, err = newAgentdProc(bin, dir, e.Mode, args...); err != nil {
		return nil, nil, nil, err
	}
	if _, err := p.start(ctx); err != nil {
		return nil, nil, nil, err
	}
	if nc, err = p.connect(); err != nil {
		return nil, nil, nil, errors.Join(err, p.stop())
	}
	return p, nc, func() error { nc.Close(); return p.stop() }, nil
}
