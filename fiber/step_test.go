package fiber_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"

	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/verify"
)

// A fiber completes one step, has a safe and an unsafe step in flight, and
// its process goes away. The resumed fiber gets the first step's recorded
// result without running it, reruns the safe step with the same op ID, and
// is told the unsafe one may have executed.
func TestStepsAcrossRecovery(t *testing.T) {
	e1 := newEnv(t)
	r1 := e1.runner(t, fiber.Config{})

	var mu sync.Mutex
	calls := map[string][]string{} // step key -> op IDs fn was called with
	record := func(key, opID string) {
		mu.Lock()
		calls[key] = append(calls[key], opID)
		mu.Unlock()
	}
	inFlight := make(chan struct{}, 2)
	_, err := r1.Go(t.Context(), "pay", func(ctx context.Context, f *fiber.Fiber) error {
		amount, err := fiber.StepJSON(ctx, "charge", func(ctx context.Context, opID string) (int, error) {
			record("charge", opID)
			return 42, nil
		})
		if err != nil || amount != 42 {
			t.Errorf("charge = %d, %v", amount, err)
		}
		var wg sync.WaitGroup
		for _, key := range []string{"email", "wire"} {
			wg.Go(func() {
				var opts []fiber.StepOpt
				if key == "wire" {
					opts = append(opts, fiber.Unsafe())
				}
				fiber.Step(ctx, key, func(ctx context.Context, opID string) (json.RawMessage, error) {
					record(key, opID)
					inFlight <- struct{}{}
					<-ctx.Done() // the process dies mid-call
					return nil, ctx.Err()
				}, opts...)
			})
		}
		wg.Wait()
		return ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	<-inFlight
	<-inFlight
	r1.Close()

	e2 := e1.restart(t)
	var r2 *fiber.Runner
	type result struct {
		amount  int
		email   json.RawMessage
		wireErr error
		err     error
	}
	var res result
	h := &hookRecorder{answer: func(ctx context.Context, _ int, rec fiber.Recovered) error {
		return r2.Resume(ctx, rec, func(ctx context.Context, f *fiber.Fiber) error {
			res.amount, res.err = fiber.StepJSON(ctx, "charge", func(ctx context.Context, opID string) (int, error) {
				record("charge", opID)
				return 0, errors.New("charged twice")
			})
			if res.err != nil {
				return res.err
			}
			res.email, res.err = fiber.Step(ctx, "email", func(ctx context.Context, opID string) (json.RawMessage, error) {
				record("email", opID)
				return json.RawMessage(`"sent"`), nil
			})
			if res.err != nil {
				return res.err
			}
			_, res.wireErr = fiber.Step(ctx, "wire", func(ctx context.Context, opID string) (json.RawMessage, error) {
				record("wire", opID)
				return nil, nil
			}, fiber.Unsafe())
			return nil
		})
	}}
	r2 = e2.runner(t, fiber.Config{Hooks: fiber.Hooks{OnFiberRecovered: h.hook}})
	if err := r2.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if res.err != nil || res.amount != 42 {
		t.Fatalf("charge after recovery = %d, %v; want recorded 42", res.amount, res.err)
	}
	if len(calls["charge"]) != 1 {
		t.Fatalf("charge ran %d times, want once", len(calls["charge"]))
	}
	if string(res.email) != `"sent"` {
		t.Fatalf("email = %s", res.email)
	}
	if e := calls["email"]; len(e) != 2 || e[0] != e[1] {
		t.Fatalf("email op IDs = %v, want the same ID twice", e)
	}
	var me *fiber.MaybeExecutedError
	if !errors.Is(res.wireErr, fiber.ErrMaybeExecuted) || !errors.As(res.wireErr, &me) || me.Key != "wire" || me.OpID != calls["wire"][0] {
		t.Fatalf("wire = %v (calls %v), want MaybeExecuted with the first op ID", res.wireErr, calls["wire"])
	}
	if len(calls["wire"]) != 1 {
		t.Fatalf("unsafe step ran again")
	}
	if rows := e2.rows(t); len(rows) != 0 {
		t.Fatalf("rows: %+v", rows)
	}
}

// Within one run, steps with the same key get distinct op IDs by position,
// each recorded with its result.
func TestStepPositions(t *testing.T) {
	e := newEnv(t)
	r := e.runner(t, fiber.Config{})
	var ids []string
	var fid string
	err := r.Run(t.Context(), "loop", func(ctx context.Context, f *fiber.Fiber) error {
		fid = f.ID()
		for i := range 3 {
			v, err := fiber.StepJSON(ctx, "turn", func(ctx context.Context, opID string) (int, error) {
				ids = append(ids, opID)
				return i * 10, nil
			})
			if err != nil || v != i*10 {
				t.Errorf("step %d = %d, %v", i, v, err)
			}
		}
		e.sync(t)
		ops, err := e.table.Ops(agent, f.ID())
		if err != nil || len(ops) != 3 {
			t.Fatalf("ops while running: %+v, %v", ops, err)
		}
		for _, op := range ops {
			if !op.Completed || op.Key != "turn" || op.Fiber != f.ID() {
				t.Errorf("op %+v", op)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 3 || ids[0] == ids[1] || ids[1] == ids[2] {
		t.Fatalf("op ids = %v", ids)
	}
	if got := e.events(t, fiber.EventOpStarted, fiber.EventOpCompleted); len(got) != 6 {
		t.Fatalf("op events = %d, want 6", len(got))
	}
	e.sync(t)
	if ops, _ := e.table.Ops(agent, fid); len(ops) != 0 {
		t.Fatalf("ops after completion: %+v", ops)
	}
}

// A step whose function fails records no completion and returns the error.
func TestStepError(t *testing.T) {
	e := newEnv(t)
	r := e.runner(t, fiber.Config{})
	err := r.Run(t.Context(), "w", func(ctx context.Context, f *fiber.Fiber) error {
		_, err := fiber.Step(ctx, "x", func(context.Context, string) (json.RawMessage, error) { return nil, errBoom })
		return err
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("Run = %v", err)
	}
	if got := e.events(t, fiber.EventOpCompleted); len(got) != 0 {
		t.Fatalf("op.completed after failure: %+v", got)
	}
}

// TestThenStash: a step completed with ThenStash records its snapshot in
// op.completed (no fiber.stashed): one write for the step's end and the
// stash. After a crash the fiber is recovered from that snapshot, with the
// attempt count it set, and the step's result is cached; answered from
// its record, the step stashes on its own.
func TestThenStash(t *testing.T) {
	e1 := newEnv(t)
	r1 := e1.runner(t, fiber.Config{})
	reached := make(chan struct{})
	_, err := r1.Go(t.Context(), "pay", func(ctx context.Context, f *fiber.Fiber) error {
		if _, err := fiber.StepJSON(ctx, "charge", func(context.Context, string) (int, error) { return 42, nil },
			fiber.ThenStash(map[string]int{"done": 1}, fiber.WithAttempts(0))); err != nil {
			return err
		}
		close(reached)
		<-ctx.Done() // the process dies
		return ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	<-reached
	r1.Close()
	if n := len(e1.events(t, fiber.EventStashed)); n != 0 {
		t.Fatalf("%d fiber.stashed events, want the snapshot in op.completed", n)
	}

	e2 := e1.restart(t)
	var r2 *fiber.Runner
	ran := 0
	done := make(chan error, 1)
	h := &hookRecorder{answer: func(ctx context.Context, _ int, rec fiber.Recovered) error {
		var st map[string]int
		if err := rec.Decode(&st); err != nil || st["done"] != 1 || rec.Attempt != 1 {
			return fmt.Errorf("recovered snapshot %v attempt %d: %v", st, rec.Attempt, err)
		}
		return r2.Resume(ctx, rec, func(ctx context.Context, f *fiber.Fiber) error {
			v, err := fiber.StepJSON(ctx, "charge", func(context.Context, string) (int, error) { ran++; return 0, nil },
				fiber.ThenStash(map[string]int{"done": 2}))
			if err == nil && v != 42 {
				err = fmt.Errorf("charge = %d, want the recorded 42", v)
			}
			done <- err
			return err
		})
	}}
	r2 = e2.runner(t, fiber.Config{Hooks: fiber.Hooks{OnFiberRecovered: h.hook}})
	if err := r2.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ran != 0 {
		t.Fatalf("a completed step ran %d times again", ran)
	}
	stashed := e2.events(t, fiber.EventStashed)
	if len(stashed) != 1 || !strings.Contains(string(stashed[0].Data), `"done":2`) {
		t.Fatalf("the cached step's stash: %v", stashed)
	}
}

// TestFirstStep: a fiber started WithSnapshot and FirstStep writes its
// snapshot and its first step's op.started in fiber.started: starting it
// and running its first step is two writes. Crashed before the step ran,
// it is recovered with that snapshot and the step counts as started: run
// again under the recorded op ID, or ErrMaybeExecuted when Unsafe.
func TestFirstStep(t *testing.T) {
	e1 := newEnv(t)
	r1 := e1.runner(t, fiber.Config{})
	ran := make(chan string, 4)
	if err := r1.Run(t.Context(), "quick", func(ctx context.Context, f *fiber.Fiber) error {
		_, err := fiber.Step(ctx, "fetch", func(_ context.Context, opID string) (json.RawMessage, error) {
			ran <- opID
			return json.RawMessage(`1`), nil
		})
		return err
	}, fiber.WithSnapshot(map[string]int{"n": 0}), fiber.FirstStep("fetch")); err != nil {
		t.Fatal(err)
	}
	<-ran
	var types []string
	for _, ev := range e1.events(t) {
		types = append(types, ev.Type)
	}
	if got := strings.Join(types, " "); got != "fiber.started op.completed fiber.completed" {
		t.Fatalf("events %s, want fiber.started op.completed fiber.completed", got)
	}

	for _, unsafe := range []bool{false, true} {
		blocked := make(chan struct{})
		id, err := r1.Go(t.Context(), "slow", func(ctx context.Context, f *fiber.Fiber) error {
			close(blocked)
			<-ctx.Done() // dies before its first step
			return ctx.Err()
		}, fiber.WithSnapshot(map[string]int{"n": 7}), fiber.FirstStep("fetch"))
		if err != nil {
			t.Fatal(err)
		}
		<-blocked
		r1.Close()
		started := e1.events(t, fiber.EventStarted)
		var first struct{ OpID string }
		json.Unmarshal(started[len(started)-1].Data, &first)

		e2, err := resumeAfterCrash(t, e1, id, map[string]int{"n": 7}, func(ctx context.Context) error {
			var opts []fiber.StepOpt
			if unsafe {
				opts = append(opts, fiber.Unsafe())
			}
			_, err := fiber.Step(ctx, "fetch", func(_ context.Context, opID string) (json.RawMessage, error) {
				ran <- opID
				return nil, nil
			}, opts...)
			return err
		})
		checkAnnouncedRun(t, err, unsafe, ran, first.OpID)
		e1 = e2
		r1 = e1.runner(t, fiber.Config{})
	}
}

// TestThenStep: a step that names the next one writes that step's
// op.started inside its own op.completed, so steps run one after another
// cost one synced write each; after a crash before the announced step
// ran, a recovered fiber runs it again under the announced op ID (or gets
// ErrMaybeExecuted for an Unsafe step), and verify, which checks that
// every op completes once and only after it started, finds the log clean.
func TestThenStep(t *testing.T) {
	e1 := newEnv(t)
	r1 := e1.runner(t, fiber.Config{})
	ran := make(chan string, 8)
	step := func(ctx context.Context, key string, opts ...fiber.StepOpt) error {
		_, err := fiber.Step(ctx, key, func(_ context.Context, opID string) (json.RawMessage, error) {
			ran <- opID
			return json.RawMessage(`1`), nil
		}, opts...)
		return err
	}
	if err := r1.Run(t.Context(), "chain", func(ctx context.Context, f *fiber.Fiber) error {
		if err := step(ctx, "a", fiber.ThenStep("b")); err != nil {
			return err
		}
		if err := step(ctx, "b", fiber.ThenStep("b"), fiber.ThenStash(1)); err != nil {
			return err
		}
		return step(ctx, "b")
	}, fiber.FirstStep("a")); err != nil {
		t.Fatal(err)
	}
	var types []string
	var nexts, ops []string
	for _, ev := range e1.events(t) {
		types = append(types, ev.Type)
		if ev.Type == fiber.EventOpCompleted {
			d := decodeData(t, ev)
			ops = append(ops, fmt.Sprint(d["opId"]))
			if n, ok := d["nextOpId"]; ok {
				nexts = append(nexts, fmt.Sprint(n))
			}
		}
	}
	if got, want := strings.Join(types, " "), "fiber.started op.completed op.completed op.completed fiber.completed"; got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
	if len(nexts) != 2 || nexts[0] != ops[1] || nexts[1] != ops[2] || ops[1] == ops[2] {
		t.Fatalf("op.completed announced %v for the ops %v", nexts, ops)
	}
	for range 3 {
		<-ran
	}

	for _, unsafe := range []bool{false, true} {
		blocked := make(chan struct{})
		id, err := r1.Go(t.Context(), "dies", func(ctx context.Context, f *fiber.Fiber) error {
			if err := step(ctx, "a", fiber.ThenStep("b"), fiber.ThenStash(map[string]int{"done": 1})); err != nil {
				return err
			}
			close(blocked)
			<-ctx.Done() // dies before the announced step
			return ctx.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		<-blocked
		<-ran
		r1.Close()
		completed := e1.events(t, fiber.EventOpCompleted)
		announced := fmt.Sprint(decodeData(t, completed[len(completed)-1])["nextOpId"])

		e2, err := resumeAfterCrash(t, e1, id, map[string]int{"done": 1}, func(ctx context.Context) error {
			if _, err := fiber.Step(ctx, "a", func(context.Context, string) (json.RawMessage, error) {
				return nil, errors.New("a completed step ran again")
			}); err != nil {
				return err
			}
			var opts []fiber.StepOpt
			if unsafe {
				opts = append(opts, fiber.Unsafe())
			}
			return step(ctx, "b", opts...)
		})
		checkAnnouncedRun(t, err, unsafe, ran, announced)
		e1 = e2
		r1 = e1.runner(t, fiber.Config{})
	}
	rep, err := verify.Check(t.Context(), e1.lg, verify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("verify:\n%s", rep)
	}
}

// TestAnnounceStep: a stash that names the next step writes that step's
// op.started inside fiber.stashed, so a stash followed by a step costs one
// synced write before the step runs; after a crash before the announced
// step ran, a recovered fiber runs it again under the announced op ID (or
// gets ErrMaybeExecuted for an Unsafe step), and verify finds the log
// clean. Fails without the runs table's or verify's reading of the
// announcement (the step would run as a new op, verify would report an op
// completed without op.started).
func TestAnnounceStep(t *testing.T) {
	e1 := newEnv(t)
	r1 := e1.runner(t, fiber.Config{})
	ran := make(chan string, 8)
	step := func(ctx context.Context, key string, opts ...fiber.StepOpt) error {
		_, err := fiber.Step(ctx, key, func(_ context.Context, opID string) (json.RawMessage, error) {
			ran <- opID
			return json.RawMessage(`1`), nil
		}, opts...)
		return err
	}
	if err := r1.Run(t.Context(), "quick", func(ctx context.Context, f *fiber.Fiber) error {
		if err := f.Stash(ctx, map[string]int{"done": 0}, fiber.AnnounceStep("a")); err != nil {
			return err
		}
		return step(ctx, "a")
	}); err != nil {
		t.Fatal(err)
	}
	<-ran
	var types []string
	var announced, completed string
	for _, ev := range e1.events(t) {
		types = append(types, ev.Type)
		switch ev.Type {
		case fiber.EventStashed:
			announced = fmt.Sprint(decodeData(t, ev)["nextOpId"])
		case fiber.EventOpCompleted:
			completed = fmt.Sprint(decodeData(t, ev)["opId"])
		}
	}
	if got, want := strings.Join(types, " "), "fiber.started fiber.stashed op.completed fiber.completed"; got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
	if announced != completed {
		t.Fatalf("the stash announced op %s, the step completed op %s", announced, completed)
	}

	for _, unsafe := range []bool{false, true} {
		blocked := make(chan struct{})
		id, err := r1.Go(t.Context(), "dies", func(ctx context.Context, f *fiber.Fiber) error {
			if err := f.Stash(ctx, map[string]int{"done": 1}, fiber.WithAttempts(0), fiber.AnnounceStep("b")); err != nil {
				return err
			}
			close(blocked)
			<-ctx.Done() // dies before the announced step
			return ctx.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		<-blocked
		r1.Close()
		stashed := e1.events(t, fiber.EventStashed)
		announced := fmt.Sprint(decodeData(t, stashed[len(stashed)-1])["nextOpId"])

		e2, err := resumeAfterCrash(t, e1, id, map[string]int{"done": 1}, func(ctx context.Context) error {
			var opts []fiber.StepOpt
			if unsafe {
				opts = append(opts, fiber.Unsafe())
			}
			return step(ctx, "b", opts...)
		})
		checkAnnouncedRun(t, err, unsafe, ran, announced)
		e1 = e2
		r1 = e1.runner(t, fiber.Config{})
	}
	rep, err := verify.Check(t.Context(), e1.lg, verify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("verify:\n%s", rep)
	}
}

// TestAnnounceStepNotInThenStash: AnnounceStep is refused inside
// ThenStash (ThenStep announces from a step), and nothing is written.
func TestAnnounceStepNotInThenStash(t *testing.T) {
	e := newEnv(t)
	r := e.runner(t, fiber.Config{})
	err := r.Run(t.Context(), "bad", func(ctx context.Context, f *fiber.Fiber) error {
		_, err := fiber.Step(ctx, "a", func(context.Context, string) (json.RawMessage, error) {
			return nil, errors.New("ran")
		}, fiber.ThenStash(1, fiber.AnnounceStep("b")))
		if !errors.Is(err, fiber.ErrInvalid) {
			return fmt.Errorf("ThenStash with AnnounceStep: %v, want ErrInvalid", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if ops := e.events(t, fiber.EventOpStarted); len(ops) != 0 {
		t.Fatalf("%d op.started written", len(ops))
	}
}

// resumeAfterCrash starts a new process on e's server, recovers fiber id,
// checks that its snapshot is want, and resumes it with body. It returns
// the new process's env and body's error.
func resumeAfterCrash(t *testing.T, e *env, id string, want map[string]int, body func(ctx context.Context) error) (*env, error) {
	t.Helper()
	e2 := e.restart(t)
	var r2 *fiber.Runner
	done := make(chan error, 1)
	h := &hookRecorder{answer: func(ctx context.Context, _ int, rec fiber.Recovered) error {
		var st map[string]int
		if err := rec.Decode(&st); err != nil || !maps.Equal(st, want) || rec.ID != id {
			err = fmt.Errorf("recovered %s with %v (%v), want %s with %v", rec.ID, st, err, id, want)
			done <- err
			return err
		}
		return r2.Resume(ctx, rec, func(ctx context.Context, f *fiber.Fiber) error {
			err := body(ctx)
			done <- err
			return err
		})
	}}
	r2 = e2.runner(t, fiber.Config{Hooks: fiber.Hooks{OnFiberRecovered: h.hook}})
	if err := r2.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	err := <-done
	r2.Close()
	return e2, err
}

// checkAnnouncedRun checks how a step whose op.started was announced
// before a crash (FirstStep, ThenStep) went when resumed: an Unsafe one
// may have executed, a safe one ran again under the announced op ID.
func checkAnnouncedRun(t *testing.T, err error, unsafe bool, ran <-chan string, announced string) {
	t.Helper()
	switch {
	case unsafe && !errors.Is(err, fiber.ErrMaybeExecuted):
		t.Fatalf("unsafe announced step after a crash: %v, want ErrMaybeExecuted", err)
	case !unsafe && err != nil:
		t.Fatal(err)
	case !unsafe:
		if got := <-ran; got != announced || announced == "" {
			t.Fatalf("the announced step ran as op %q, the log announced %q", got, announced)
		}
	}
}
