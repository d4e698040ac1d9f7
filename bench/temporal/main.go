// Command temporal-steps is the Temporal side of the bench scenario
// "temporal": it measures a Temporal regular activity the way the scenario
// measures a Forever fiber step, so the two can be compared in one run.
//
// It starts the Temporal CLI's development server on a file database
// (temporal server start-dev --db-filename, SQLite) on free loopback ports,
// runs a worker in this process, and then reads one number K per line on
// stdin. For each it runs a workflow of K regular activities, one after
// another, and writes one JSON line: the gaps in nanoseconds between the
// starts of consecutive activities, each one activity's full cycle
// (scheduled in history, dispatched to the worker, completed, recorded,
// the workflow task that schedules the next). An empty line or EOF ends it.
//
// It is a module of its own so that the Temporal SDK stays out of the
// Forever module's dependencies: go -C bench/temporal build.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

const taskQueue = "forever-bench"

// serverConfig tunes the dev server for latency, as a user measuring one
// sequential workflow would, so that the comparison is with Temporal at
// its fastest here:
//   - one task queue partition: a task is matched to the waiting poller,
//     never forwarded between partitions;
//   - eager activities: the workflow task's completion hands the activity
//     to the worker that scheduled it;
//   - no cap on how often the history service reads its transfer queue:
//     at the default 20 reads a second, once the limiter's burst is spent,
//     every workflow task waited up to 50 ms (100 ms an activity, measured).
var serverConfig = []string{
	"matching.numTaskqueueReadPartitions=1",
	"matching.numTaskqueueWritePartitions=1",
	"system.enableActivityEagerExecution=true",
	"history.transferProcessorMaxPollRPS=100000",
	"history.transferProcessorMaxPollHostRPS=100000",
}

func main() {
	bin := flag.String("temporal", "temporal", "the Temporal CLI binary")
	dir := flag.String("dir", os.TempDir(), "where the server's database file goes (the disk under test)")
	memory := flag.Bool("memory", false, "keep the server's database in memory, not in a file")
	flag.Parse()
	if err := run(*bin, *dir, *memory); err != nil {
		fmt.Fprintln(os.Stderr, "temporal-steps:", err)
		os.Exit(1)
	}
}

func run(bin, dir string, memory bool) (err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	port, err := freePort()
	if err != nil {
		return err
	}
	srv, err := startServer(ctx, bin, dir, port, memory)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, srv.stop()) }()

	logger := sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	var c client.Client
	deadline := time.Now().Add(time.Minute)
	for {
		c, err = client.Dial(client.Options{HostPort: fmt.Sprintf("127.0.0.1:%d", port), Logger: logger})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dial the dev server: %w\n%s", err, srv.tail())
		}
		time.Sleep(200 * time.Millisecond)
	}
	defer c.Close()

	var rec recorder
	w := worker.New(c, taskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(stepsWorkflow, workflow.RegisterOptions{Name: "steps"})
	w.RegisterActivity(&rec) // its exported methods: the activity type Step
	if err := w.Start(); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer w.Stop()

	in := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for n := 0; in.Scan(); n++ {
		line := strings.TrimSpace(in.Text())
		if line == "" {
			return nil
		}
		k, err := strconv.Atoi(line)
		if err != nil || k < 2 {
			return fmt.Errorf("stdin: want a count of activities >= 2, got %q", line)
		}
		rec.reset()
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Minute)
		run, err := c.ExecuteWorkflow(wctx, client.StartWorkflowOptions{ID: fmt.Sprintf("steps-%d", n), TaskQueue: taskQueue}, "steps", k)
		if err == nil {
			err = run.Get(wctx, nil)
		}
		wcancel()
		if err != nil {
			return fmt.Errorf("workflow %d: %w", n, err)
		}
		starts := rec.times()
		if len(starts) != k {
			return fmt.Errorf("workflow %d: %d activities ran, want %d", n, len(starts), k)
		}
		gaps := make([]int64, 0, k-1)
		for i := 1; i < k; i++ {
			gaps = append(gaps, starts[i].Sub(starts[i-1]).Nanoseconds())
		}
		if err := out.Encode(gaps); err != nil {
			return err
		}
	}
	return in.Err()
}

// stepsWorkflow runs k regular activities one after another.
func stepsWorkflow(ctx workflow.Context, k int) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	for i := range k {
		if err := workflow.ExecuteActivity(ctx, "Step", i).Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

// recorder is the activity: it notes when each run starts.
type recorder struct {
	mu     sync.Mutex
	starts []time.Time
}

// Step is the activity body; its name is the activity type.
func (r *recorder) Step(_ context.Context, i int) (int, error) {
	r.mu.Lock()
	r.starts = append(r.starts, time.Now())
	r.mu.Unlock()
	return i, nil
}

func (r *recorder) reset() {
	r.mu.Lock()
	r.starts = r.starts[:0]
	r.mu.Unlock()
}

func (r *recorder) times() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.starts...)
}

// server is the running dev server.
type server struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func startServer(ctx context.Context, bin, dir string, port int, memory bool) (*server, error) {
	d, err := os.MkdirTemp(dir, "temporal-steps-")
	if err != nil {
		return nil, err
	}
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	logPath := filepath.Join(d, "server.log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := []string{"server", "start-dev", "--headless"}
	if !memory {
		args = append(args, "--db-filename", filepath.Join(d, "temporal.db"))
	}
	cmd := exec.CommandContext(ctx, bin, append(args,
		"--ip", "127.0.0.1", "--port", strconv.Itoa(port),
		"--http-port", strconv.Itoa(ports[0]), "--metrics-port", strconv.Itoa(ports[1]),
		"--log-level", "error")...)
	for _, kv := range serverConfig {
		cmd.Args = append(cmd.Args, "--dynamic-config-value", kv)
	}
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &server{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { cmd.Wait(); lf.Close(); close(s.done) }()
	return s, nil
}

func (s *server) stop() error {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	return os.RemoveAll(filepath.Dir(s.log))
}

func (s *server) tail() string {
	b, _ := os.ReadFile(s.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
