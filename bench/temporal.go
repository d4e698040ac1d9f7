package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/forever-agents/forever/agentd/demo"
)

// temporalScenario compares a durable step through agentd with a Temporal
// regular activity on a file database, measured beside it by the same
// method: the gaps between consecutive steps of one sequential run.
//
//   - Forever: the steps agent of an agentd --sync always (the default),
//     as in sync-cost: a "start" of syncFiberSteps steps with no delay,
//     timed as the gaps between its op.completed events. With "effect":
//     "none" the step's body does nothing, as the Temporal activity does
//     (it notes the time in memory): each gap is op.started and
//     op.completed, which carries the step's stash, two synced writes; this
//     is the like-for-like figure the target applies to. With the default
//     effect the body appends its own event too: three synced writes.
//   - Temporal: the Temporal CLI's development server (temporal server
//     start-dev, SQLite in a file under -dir), with a workflow of
//     syncFiberSteps regular activities run one after another by a worker
//     on loopback, timed as the gaps between the activities' starts
//     (bench/temporal, a module of its own so that the Temporal SDK stays
//     out of Forever's dependencies).
//
// Rounds alternate between them. The scenario needs -temporal with the
// path of a temporal binary (go install
// github.com/temporalio/cli/cmd/temporal@v1.5.1); without it, it is
// skipped.
func temporalScenario(ctx context.Context, env *Env) (res Result, err error) {
	if env.cfg.Temporal == "" {
		env.Logger.Warn("bench: temporal skipped: give -temporal with the path of a Temporal CLI binary")
		return Result{}, nil
	}
	bin, err := env.AgentdBinary(ctx)
	if err != nil {
		return Result{}, err
	}
	ours, err := openSyncTarget(ctx, env, bin, SyncAlways)
	if err != nil {
		return Result{}, err
	}
	defer func() { err = errors.Join(err, ours.close()) }()
	theirs, err := startTemporalSteps(ctx, env)
	if err != nil {
		return Result{}, err
	}
	defer func() { err = errors.Join(err, theirs.close()) }()

	if _, err := ours.fiber(ctx, 3, demo.StepEffectNone); err != nil {
		return Result{}, fmt.Errorf("warm up agentd: %w", err)
	}
	if _, err := theirs.run(3); err != nil {
		return Result{}, fmt.Errorf("warm up temporal: %w", err)
	}
	var a, e, b []time.Duration
	fibers := max(2, env.Count(syncSteps, syncSteps)/syncFiberSteps)
	err = alternate(fibers, func(int) error {
		gaps, err := ours.fiber(ctx, syncFiberSteps, demo.StepEffectNone)
		a = append(a, gaps...)
		if err != nil {
			return err
		}
		gaps, err = ours.fiber(ctx, syncFiberSteps, demo.StepEffectEvent)
		e = append(e, gaps...)
		return err
	}, func(int) error {
		gaps, err := theirs.run(syncFiberSteps)
		b = append(b, gaps...)
		return err
	})
	if err != nil {
		return Result{}, err
	}
	row := func(p float64) Row {
		return Row{
			Figure: fmt.Sprintf("step p%.0f ms, no effect, agentd --sync always", p), Value: millis(percentile(a, p)),
			Baseline: fmt.Sprintf("Temporal regular activity, start-dev on SQLite, p%.0f ms", p), BaselineValue: millis(percentile(b, p)),
			LowerIsBetter: true, Target: 20, TargetNote: "a step 20x faster than a Temporal activity",
		}
	}
	withEvent := func(p float64) Row {
		return Row{
			Figure: fmt.Sprintf("step p%.0f ms, its effect an event, agentd --sync always", p), Value: millis(percentile(e, p)),
			Baseline: fmt.Sprintf("Temporal regular activity, start-dev on SQLite, p%.0f ms", p), BaselineValue: millis(percentile(b, p)),
			LowerIsBetter: true,
		}
	}
	return Result{Rows: []Row{row(50), row(99), withEvent(50), withEvent(99)}}, nil
}

// temporalSteps is the running bench/temporal helper.
type temporalSteps struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr *os.File
	dir    string
}

// startTemporalSteps builds bench/temporal and starts it against the
// -temporal binary, with the server's database under a temp dir of env.
func startTemporalSteps(ctx context.Context, env *Env) (t *temporalSteps, err error) {
	dir, err := env.TempDir()
	if err != nil {
		return nil, err
	}
	t = &temporalSteps{dir: dir}
	defer func() {
		if err != nil {
			err = errors.Join(err, t.close())
		}
	}()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	mod, err := exec.CommandContext(ctx, goBin, "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(mod)) == "" || strings.TrimSpace(string(mod)) == os.DevNull {
		return nil, fmt.Errorf("bench: temporal: run the bench inside the forever module (go env GOMOD: %v)", err)
	}
	src := filepath.Join(filepath.Dir(strings.TrimSpace(string(mod))), "bench", "temporal")
	helper := filepath.Join(dir, "temporal-steps")
	if out, err := exec.CommandContext(ctx, goBin, "-C", src, "build", "-o", helper, ".").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("bench: go build bench/temporal: %v\n%s", err, out)
	}
	if t.stderr, err = os.Create(filepath.Join(dir, "helper.log")); err != nil {
		return nil, err
	}
	t.cmd = exec.Command(helper, "-temporal", env.cfg.Temporal, "-dir", dir)
	t.cmd.Stderr = t.stderr
	if t.in, err = t.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	t.out = bufio.NewScanner(out)
	t.out.Buffer(make([]byte, 1<<16), 1<<24)
	if err := t.cmd.Start(); err != nil {
		t.cmd = nil
		return nil, fmt.Errorf("bench: start bench/temporal: %w", err)
	}
	return t, nil
}

// run runs a workflow of k activities and returns the gaps between their
// starts.
func (t *temporalSteps) run(k int) ([]time.Duration, error) {
	if _, err := fmt.Fprintln(t.in, strconv.Itoa(k)); err != nil {
		return nil, fmt.Errorf("bench: temporal helper: %w\n%s", err, t.tail())
	}
	if !t.out.Scan() {
		return nil, fmt.Errorf("bench: temporal helper ended: %v\n%s", t.out.Err(), t.tail())
	}
	var ns []int64
	if err := json.Unmarshal(t.out.Bytes(), &ns); err != nil {
		return nil, fmt.Errorf("bench: temporal helper wrote %q: %w", t.out.Bytes(), err)
	}
	if len(ns) != k-1 {
		return nil, fmt.Errorf("bench: temporal helper: %d gaps for %d activities", len(ns), k)
	}
	gaps := make([]time.Duration, len(ns))
	for i, n := range ns {
		gaps[i] = time.Duration(n)
	}
	return gaps, nil
}

func (t *temporalSteps) tail() string {
	b, _ := os.ReadFile(filepath.Join(t.dir, "helper.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// close ends the helper (which stops its server) and deletes its dir.
func (t *temporalSteps) close() error {
	var err error
	if t.cmd != nil {
		t.in.Close() // EOF: the helper stops its worker and server
		done := make(chan error, 1)
		go func() { done <- t.cmd.Wait() }()
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			t.cmd.Process.Kill()
			err = errors.Join(errors.New("bench: temporal helper did not stop"), <-done)
		}
	}
	if t.stderr != nil {
		t.stderr.Close()
	}
	return errors.Join(err, os.RemoveAll(t.dir))
}
