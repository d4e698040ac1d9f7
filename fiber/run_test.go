package fiber_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/prometheus/client_golang/prometheus"
)

func TestRunInline(t *testing.T) {
	e := newEnv(t)
	ka := &keepAlive{}
	reg := prometheus.NewRegistry()
	r := e.runner(t, fiber.Config{KeepAlive: ka, Registerer: reg})
	ctx := t.Context()

	var id string
	err := r.Run(ctx, "work", func(ctx context.Context, f *fiber.Fiber) error {
		id = f.ID()
		// fiber.started is acknowledged before fn runs.
		started := e.events(t, fiber.EventStarted)
		if len(started) != 1 || decodeData(t, started[0])["id"] != f.ID() || decodeData(t, started[0])["name"] != "work" {
			t.Errorf("fiber.started in the log when fn runs: %+v", started)
		}
		if held, _ := ka.counts(); held != 1 {
			t.Errorf("keepalive refs held while running = %d, want 1", held)
		}
		if got, ok := fiber.FromContext(ctx); !ok || got != f {
			t.Error("FromContext does not return the fiber")
		}
		if rows := e.rows(t); len(rows) != 1 || rows[0].ID != f.ID() || rows[0].Name != "work" || rows[0].CreatedAt.IsZero() {
			t.Errorf("runs rows while running: %+v", rows)
		}
		return fiber.Stash(ctx, map[string]int{"step": 1})
	})
	if err != nil {
		t.Fatal(err)
	}
	if held, acquired := ka.counts(); held != 0 || acquired != 1 {
		t.Fatalf("keepalive held, acquired = %d, %d; want 0, 1", held, acquired)
	}
	if got, want := e.eventTypes(t), "fiber.started fiber.stashed fiber.completed"; got != want {
		t.Fatalf("events = %s, want %s", got, want)
	}
	if rows := e.rows(t); len(rows) != 0 {
		t.Fatalf("rows after completion: %+v", rows)
	}
	if _, err := e.table.Get(agent, id); !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("Get after completion = %v, want ErrNotFound", err)
	}
	if got := metricValue(t, reg, "forever_fiber_started_total"); got != 1 {
		t.Errorf("started_total = %v", got)
	}
	if got := metricValue(t, reg, "forever_fiber_completed_total"); got != 1 {
		t.Errorf("completed_total = %v", got)
	}
	if got := metricValue(t, reg, "forever_fiber_stash_seconds"); got != 1 {
		t.Errorf("stash_seconds count = %v", got)
	}
}

// metricValue returns a counter's value (summed over labels) or a
// histogram's sample count.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var v float64
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				v += float64(h.GetSampleCount())
			} else {
				v += m.GetCounter().GetValue()
			}
		}
		return v
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

func TestRunFailure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fn      func(ctx context.Context, f *fiber.Fiber) error
		check   func(t *testing.T, err error)
		errText string
	}{
		{
			name: "error",
			fn:   func(ctx context.Context, f *fiber.Fiber) error { return fmt.Errorf("step 2: %w", errBoom) },
			check: func(t *testing.T, err error) {
				if !errors.Is(err, errBoom) {
					t.Fatalf("Run = %v, want errBoom", err)
				}
			},
			errText: "step 2: boom",
		},
		{
			name: "panic",
			fn:   func(ctx context.Context, f *fiber.Fiber) error { panic("kaboom") },
			check: func(t *testing.T, err error) {
				var pe *fiber.PanicError
				if !errors.As(err, &pe) || pe.Value != "kaboom" || len(pe.Stack) == 0 {
					t.Fatalf("Run = %v, want *PanicError(kaboom)", err)
				}
			},
			errText: "fiber: panic: kaboom",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ka := &keepAlive{}
			r := e.runner(t, fiber.Config{KeepAlive: ka})
			tc.check(t, r.Run(t.Context(), "work", tc.fn))
			failed := e.events(t, fiber.EventFailed)
			if len(failed) != 1 || decodeData(t, failed[0])["error"] != tc.errText {
				t.Fatalf("fiber.failed events: %+v", failed)
			}
			if rows := e.rows(t); len(rows) != 0 {
				t.Fatalf("rows after failure: %+v", rows)
			}
			if held, _ := ka.counts(); held != 0 {
				t.Fatalf("keepalive still held: %d", held)
			}
		})
	}
}

func TestGo(t *testing.T) {
	e := newEnv(t)
	ka := &keepAlive{}
	sink := newErrSink()
	r := e.runner(t, fiber.Config{KeepAlive: ka, Hooks: fiber.Hooks{OnError: sink.OnError}})
	reqCtx, cancelReq := context.WithCancel(t.Context())
	release := make(chan struct{})
	id, err := r.Go(reqCtx, "bg", func(ctx context.Context, f *fiber.Fiber) error {
		<-release
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fiber.Stash(ctx, "done")
	})
	if err != nil {
		t.Fatal(err)
	}
	// fiber.started is durable when Go returns.
	if started := e.events(t, fiber.EventStarted); len(started) != 1 || decodeData(t, started[0])["id"] != id {
		t.Fatalf("started events: %+v", started)
	}
	cancelReq() // the request ends; the background fiber goes on
	if held, _ := ka.counts(); held != 1 {
		t.Fatalf("keepalive held = %d, want 1", held)
	}
	close(release)
	r.Wait()
	if got := e.events(t, fiber.EventCompleted); len(got) != 1 {
		t.Fatalf("completed events: %+v", got)
	}
	if held, _ := ka.counts(); held != 0 {
		t.Fatalf("keepalive held after Wait = %d", held)
	}

	// A failing background fiber reaches OnError.
	id, err = r.Go(t.Context(), "bad", func(ctx context.Context, f *fiber.Fiber) error { return errBoom })
	if err != nil {
		t.Fatal(err)
	}
	got := sink.next(t)
	var fe *fiber.FailedError
	if !errors.As(got, &fe) || fe.ID != id || fe.Name != "bad" || !errors.Is(got, errBoom) {
		t.Fatalf("OnError got %v, want *FailedError for %s", got, id)
	}
}

func TestStashOutsideFiber(t *testing.T) {
	ctx := t.Context()
	if err := fiber.Stash(ctx, 1); !errors.Is(err, fiber.ErrNoFiber) {
		t.Fatalf("Stash = %v, want ErrNoFiber", err)
	}
	if _, err := fiber.StepJSON(ctx, "k", func(context.Context, string) (int, error) { return 1, nil }); !errors.Is(err, fiber.ErrNoFiber) {
		t.Fatalf("StepJSON = %v, want ErrNoFiber", err)
	}
	if _, ok := fiber.FromContext(ctx); ok {
		t.Fatal("FromContext outside a fiber")
	}
}

func TestStashAfterReturn(t *testing.T) {
	e := newEnv(t)
	r := e.runner(t, fiber.Config{})
	var leaked *fiber.Fiber
	if err := r.Run(t.Context(), "w", func(ctx context.Context, f *fiber.Fiber) error { leaked = f; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := leaked.Stash(t.Context(), 1); !errors.Is(err, fiber.ErrFiberDone) {
		t.Fatalf("Stash after return = %v, want ErrFiberDone", err)
	}
}

// Several fibers stash concurrently, through their contexts from nested
// code; each row holds its own last snapshot.
func TestConcurrentStashes(t *testing.T) {
	e := newEnv(t)
	r := e.runner(t, fiber.Config{})
	const fibers, stashes = 6, 5
	type snap struct{ Fiber, N int }
	nested := func(ctx context.Context, i, n int) error { return fiber.Stash(ctx, snap{i, n}) }

	var stashed sync.WaitGroup
	stashed.Add(fibers)
	release := make(chan struct{})
	ids := make([]string, fibers)
	for i := range fibers {
		id, err := r.Go(t.Context(), fmt.Sprintf("f%d", i), func(ctx context.Context, f *fiber.Fiber) error {
			defer func() { <-release }()
			defer stashed.Done()
			for n := 1; n <= stashes; n++ {
				if err := nested(ctx, i, n); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	stashed.Wait()
	byID := map[string]fiber.Row{}
	for _, row := range e.rows(t) {
		byID[row.ID] = row
	}
	for i, id := range ids {
		row, ok := byID[id]
		if !ok {
			t.Fatalf("no row for fiber %d", i)
		}
		if got, want := string(row.Snapshot), fmt.Sprintf(`{"Fiber":%d,"N":%d}`, i, stashes); got != want {
			t.Errorf("fiber %d snapshot = %s, want %s", i, got, want)
		}
	}
	close(release)
	r.Wait()
	if rows := e.rows(t); len(rows) != 0 {
		t.Fatalf("rows left: %+v", rows)
	}
}

func TestConfigValidate(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name string
		cfg  fiber.Config
	}{
		{"no log", fiber.Config{Table: e.table, Agent: agent}},
		{"no table", fiber.Config{Log: e.lg, Agent: agent}},
		{"bad agent", fiber.Config{Log: e.lg, Table: e.table, Agent: "a.b"}},
		{"bad backoff", fiber.Config{Log: e.lg, Table: e.table, Agent: agent, BackoffBase: 2, BackoffMax: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := fiber.New(tc.cfg); !errors.Is(err, fiber.ErrInvalid) {
				t.Fatalf("New = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestClose(t *testing.T) {
	e := newEnv(t)
	r := e.runner(t, fiber.Config{})
	running := make(chan struct{})
	id, err := r.Go(t.Context(), "long", func(ctx context.Context, f *fiber.Fiber) error {
		if err := f.Stash(ctx, "halfway"); err != nil {
			return err
		}
		close(running)
		<-ctx.Done()
		return ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	<-running
	r.Close()
	// Interrupted, not failed: the row stays for recovery.
	if got := e.events(t, fiber.EventFailed, fiber.EventCompleted); len(got) != 0 {
		t.Fatalf("end events after Close: %+v", got)
	}
	rows := e.rows(t)
	if len(rows) != 1 || rows[0].ID != id || string(rows[0].Snapshot) != `"halfway"` {
		t.Fatalf("rows after Close: %+v", rows)
	}
	if err := r.Run(t.Context(), "late", func(context.Context, *fiber.Fiber) error { return nil }); !errors.Is(err, fiber.ErrStopped) {
		t.Fatalf("Run after Close = %v, want ErrStopped", err)
	}
}
