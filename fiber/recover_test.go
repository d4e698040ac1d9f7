package fiber_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

// crashed leaves fiber id in the log as a process that died while running
// it would: started, stashed, never ended.
func crashed(t *testing.T, e *env, id string, snapshots ...string) {
	t.Helper()
	e.appendRaw(t, fiber.EventStarted, map[string]any{"id": id, "name": "research", "createdAt": time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)})
	for _, s := range snapshots {
		e.appendRaw(t, fiber.EventStashed, map[string]any{"id": id, "snapshot": json.RawMessage(s)})
	}
}

// hookRecorder is an OnFiberRecovered that records its calls and answers
// with answer(n) for the n-th call (from 1).
type hookRecorder struct {
	mu     sync.Mutex
	calls  []fiber.Recovered
	answer func(ctx context.Context, n int, rec fiber.Recovered) error
}

func (h *hookRecorder) hook(ctx context.Context, rec fiber.Recovered) error {
	h.mu.Lock()
	h.calls = append(h.calls, rec)
	n := len(h.calls)
	h.mu.Unlock()
	if h.answer == nil {
		return nil
	}
	return h.answer(ctx, n, rec)
}

func (h *hookRecorder) got() []fiber.Recovered {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]fiber.Recovered(nil), h.calls...)
}

func attempts(t *testing.T, e *env) []int {
	var out []int
	for _, ev := range e.events(t, fiber.EventRecovered) {
		out = append(out, int(decodeData(t, ev)["attempt"].(float64)))
	}
	return out
}

// A process dies with a fiber running; a new process (fresh Pebble, same
// log) recovers it once with the last snapshot and resumes it under the
// same ID.
func TestRecoverAfterCrash(t *testing.T) {
	old := newEnv(t)
	crashed(t, old, "F1", `{"step":1}`, `{"step":2}`)

	e := old.restart(t)
	ka := &keepAlive{}
	var r *fiber.Runner
	var resumedSnap json.RawMessage
	h := &hookRecorder{answer: func(ctx context.Context, n int, rec fiber.Recovered) error {
		return r.Resume(ctx, rec, func(ctx context.Context, f *fiber.Fiber) error {
			if f.ID() != rec.ID || f.Attempt() != 1 {
				t.Errorf("resumed fiber %s attempt %d", f.ID(), f.Attempt())
			}
			resumedSnap = f.Snapshot()
			return fiber.Stash(ctx, map[string]int{"step": 3})
		})
	}}
	r = e.runner(t, fiber.Config{KeepAlive: ka, Hooks: fiber.Hooks{OnFiberRecovered: h.hook}})
	if err := r.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	calls := h.got()
	if len(calls) != 1 {
		t.Fatalf("hook calls = %d, want 1", len(calls))
	}
	rec := calls[0]
	if rec.ID != "F1" || rec.Name != "research" || rec.Attempt != 1 || string(rec.Snapshot) != `{"step":2}` || !rec.CreatedAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("recovered = %+v", rec)
	}
	var st struct{ Step int }
	if err := rec.Decode(&st); err != nil || st.Step != 2 {
		t.Fatalf("Decode = %+v, %v", st, err)
	}
	if string(resumedSnap) != `{"step":2}` {
		t.Fatalf("resumed fiber snapshot = %s", resumedSnap)
	}
	if got, want := e.eventTypes(t), "fiber.started fiber.stashed fiber.stashed fiber.recovered fiber.stashed fiber.completed"; got != want {
		t.Fatalf("events = %s\nwant %s", got, want)
	}
	if rows := e.rows(t); len(rows) != 0 {
		t.Fatalf("rows after resumed completion: %+v", rows)
	}
	if held, acquired := ka.counts(); held != 0 || acquired != 2 {
		t.Fatalf("keepalive held, acquired = %d, %d; want 0, 2 (recovery + resumed run)", held, acquired)
	}
	// Nothing left: a second Recover calls nothing.
	if err := r.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := len(h.got()); n != 1 {
		t.Fatalf("hook calls after second Recover = %d", n)
	}
}

// A Runner closed under a running fiber leaves it for the next process,
// which resumes it in the background with GoResume.
func TestRecoverInterrupted(t *testing.T) {
	e1 := newEnv(t)
	r1 := e1.runner(t, fiber.Config{})
	running := make(chan struct{})
	id, err := r1.Go(t.Context(), "job", func(ctx context.Context, f *fiber.Fiber) error {
		if err := fiber.Stash(ctx, "half"); err != nil {
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
	r1.Close()

	e2 := e1.restart(t)
	var r2 *fiber.Runner
	done := make(chan string, 1)
	h := &hookRecorder{answer: func(ctx context.Context, _ int, rec fiber.Recovered) error {
		return r2.GoResume(ctx, rec, func(ctx context.Context, f *fiber.Fiber) error {
			var s string
			if err := rec.Decode(&s); err != nil {
				return err
			}
			done <- f.ID() + ":" + s
			return nil
		})
	}}
	r2 = e2.runner(t, fiber.Config{Hooks: fiber.Hooks{OnFiberRecovered: h.hook}})
	if err := r2.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, want := <-done, id+":half"; got != want {
		t.Fatalf("resumed = %s, want %s", got, want)
	}
	r2.Wait()
	if rows := e2.rows(t); len(rows) != 0 {
		t.Fatalf("rows: %+v", rows)
	}
}

func TestRecoverHookRetry(t *testing.T) {
	e := newEnv(t)
	crashed(t, e, "F1", `1`)
	h := &hookRecorder{answer: func(_ context.Context, n int, _ fiber.Recovered) error {
		if n < 3 {
			return errBoom
		}
		return nil // handled without resuming: the fiber ends
	}}
	r := e.runner(t, fiber.Config{Hooks: fiber.Hooks{OnFiberRecovered: h.hook}})
	if err := r.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	var seen []int
	for _, c := range h.got() {
		seen = append(seen, c.Attempt)
	}
	if got, want := seen, []int{1, 2, 3}; !equalInts(got, want) {
		t.Fatalf("hook attempts = %v, want %v", got, want)
	}
	if got, want := attempts(t, e), []int{1, 2, 3}; !equalInts(got, want) {
		t.Fatalf("fiber.recovered attempts = %v, want %v", got, want)
	}
	if got := e.events(t, fiber.EventCompleted); len(got) != 1 {
		t.Fatalf("completed: %+v", got)
	}
	if rows := e.rows(t); len(rows) != 0 {
		t.Fatalf("rows: %+v", rows)
	}
}

func TestRecoverAbandon(t *testing.T) {
	e := newEnv(t)
	crashed(t, e, "F1")
	sink := newErrSink()
	h := &hookRecorder{answer: func(context.Context, int, fiber.Recovered) error { return errBoom }}
	r := e.runner(t, fiber.Config{MaxAttempts: 3, Hooks: fiber.Hooks{OnFiberRecovered: h.hook, OnError: sink.OnError}})
	if err := r.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := len(h.got()); n != 3 {
		t.Fatalf("hook calls = %d, want 3", n)
	}
	err := sink.next(t)
	var ae *fiber.AbandonedError
	if !errors.As(err, &ae) || ae.ID != "F1" || ae.Name != "research" || ae.Attempts != 3 || !errors.Is(err, errBoom) || !errors.Is(err, fiber.ErrAbandoned) {
		t.Fatalf("OnError = %v", err)
	}
	ab := e.events(t, fiber.EventAbandoned)
	if len(ab) != 1 {
		t.Fatalf("abandoned events: %+v", ab)
	}
	if d := decodeData(t, ab[0]); d["attempts"] != 3.0 || d["reason"] != "boom" {
		t.Fatalf("abandoned data = %v", d)
	}
	if rows := e.rows(t); len(rows) != 0 {
		t.Fatalf("rows: %+v", rows)
	}
}

// Attempts recorded by earlier processes count: a crash during the hook
// leaves attempt n, the next start runs n+1, and a fiber whose attempts are
// used up is abandoned without calling the hook.
func TestRecoverAcrossCrashes(t *testing.T) {
	e := newEnv(t)
	crashed(t, e, "F1", `"s"`)
	e.appendRaw(t, fiber.EventRecovered, map[string]any{"id": "F1", "attempt": 1})
	e.appendRaw(t, fiber.EventRecovered, map[string]any{"id": "F1", "attempt": 2})
	crashed(t, e, "F2")
	for i := 1; i <= 5; i++ {
		e.appendRaw(t, fiber.EventRecovered, map[string]any{"id": "F2", "attempt": i})
	}

	sink := newErrSink()
	h := &hookRecorder{}
	r := e.restart(t).runner(t, fiber.Config{Hooks: fiber.Hooks{OnFiberRecovered: h.hook, OnError: sink.OnError}})
	if err := r.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	calls := h.got()
	if len(calls) != 1 || calls[0].ID != "F1" || calls[0].Attempt != 3 || string(calls[0].Snapshot) != `"s"` {
		t.Fatalf("hook calls = %+v, want F1 attempt 3", calls)
	}
	err := sink.next(t)
	var ae *fiber.AbandonedError
	if !errors.As(err, &ae) || ae.ID != "F2" || ae.Attempts != 5 || !errors.Is(err, fiber.ErrAttemptsExhausted) {
		t.Fatalf("OnError = %v", err)
	}
}

// Recover leaves the fibers this Runner runs alone.
func TestRecoverSkipsLive(t *testing.T) {
	e := newEnv(t)
	h := &hookRecorder{}
	r := e.runner(t, fiber.Config{Hooks: fiber.Hooks{OnFiberRecovered: h.hook}})
	release := make(chan struct{})
	if _, err := r.Go(t.Context(), "live", func(ctx context.Context, f *fiber.Fiber) error { <-release; return nil }); err != nil {
		t.Fatal(err)
	}
	// Fibers that end right before or during Recover are not orphans either.
	for range 5 {
		if err := r.Run(t.Context(), "quick", func(context.Context, *fiber.Fiber) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	close(release)
	r.Wait()
	if n := len(h.got()); n != 0 {
		t.Fatalf("hook called %d times for live fibers", n)
	}
}

func TestRecoverNoHook(t *testing.T) {
	e := newEnv(t)
	crashed(t, e, "F1")
	sink := newErrSink()
	r := e.runner(t, fiber.Config{Hooks: fiber.Hooks{OnError: sink.OnError}})
	if err := r.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := sink.next(t); !errors.Is(err, fiber.ErrNoHook) || !errors.Is(err, fiber.ErrAbandoned) {
		t.Fatalf("OnError = %v", err)
	}
}

// corruptView serves garbage for the row of one fiber, as a damaged Pebble
// row would read.
type corruptView struct {
	fiber.View
	id string
}

func (v corruptView) fix(k, val []byte) []byte {
	if bytes.HasPrefix(k, []byte("r\x00")) && bytes.HasSuffix(k, []byte("\x00"+v.id)) {
		return []byte(`{"id":"` + v.id + `","snapshot":{not json`)
	}
	return val
}

func (v corruptView) Get(k []byte) ([]byte, error) {
	val, err := v.View.Get(k)
	return v.fix(k, val), err
}

func (v corruptView) Scan(p []byte) iter.Seq2[eventlog.KV, error] {
	return func(yield func(eventlog.KV, error) bool) {
		for kv, err := range v.View.Scan(p) {
			if err == nil {
				kv.Value = v.fix(kv.Key, kv.Value)
			}
			if !yield(kv, err) {
				return
			}
		}
	}
}

func TestRecoverCorrupt(t *testing.T) {
	e0 := newEnv(t)
	crashed(t, e0, "BAD", `{"ok":true}`)
	crashed(t, e0, "ODD", `"a string, not an object"`)
	e := openEnv(t, e0.srv, func(v fiber.View) fiber.View { return corruptView{v, "BAD"} })

	sink := newErrSink()
	var decodeErr error
	h := &hookRecorder{answer: func(_ context.Context, _ int, rec fiber.Recovered) error {
		var st struct{ OK bool }
		decodeErr = rec.Decode(&st)
		return nil
	}}
	r := e.runner(t, fiber.Config{Hooks: fiber.Hooks{OnFiberRecovered: h.hook, OnError: sink.OnError}})
	if err := r.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The unreadable row is reported, naming the fiber, and not passed on.
	err := sink.next(t)
	if !errors.Is(err, eventlog.ErrCorrupt) || !strings.Contains(err.Error(), "BAD") {
		t.Fatalf("OnError = %v, want ErrCorrupt naming BAD", err)
	}
	// The snapshot that does not fit the hook's type arrives raw; Decode
	// says it is corrupt.
	calls := h.got()
	if len(calls) != 1 || calls[0].ID != "ODD" || string(calls[0].Snapshot) != `"a string, not an object"` {
		t.Fatalf("hook calls = %+v", calls)
	}
	if !errors.Is(decodeErr, eventlog.ErrCorrupt) {
		t.Fatalf("Decode = %v, want ErrCorrupt", decodeErr)
	}
	if err := (fiber.Recovered{ID: "x"}).Decode(new(int)); !errors.Is(err, fiber.ErrNoSnapshot) {
		t.Fatalf("Decode without snapshot = %v", err)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A fiber that makes progress between crashes resets its attempt count
// (Stash WithAttempts): it is recovered more than MaxAttempts times in all
// and never abandoned, while one that does not is abandoned on time.
func TestRecoverProgressResetsAttempts(t *testing.T) {
	e := newEnv(t)
	crashed(t, e, "F1", `0`)
	const max = 2
	for i := 1; i <= 2*max+1; i++ {
		sink := newErrSink()
		var r *fiber.Runner
		resumed := make(chan struct{})
		h := &hookRecorder{answer: func(ctx context.Context, _ int, rec fiber.Recovered) error {
			return r.GoResume(ctx, rec, func(ctx context.Context, f *fiber.Fiber) error {
				// Progress, then the process dies (Close interrupts).
				if err := f.Stash(ctx, i, fiber.WithAttempts(0)); err != nil {
					return err
				}
				close(resumed)
				<-ctx.Done()
				return ctx.Err()
			})
		}}
		r = e.runner(t, fiber.Config{MaxAttempts: max, Hooks: fiber.Hooks{OnFiberRecovered: h.hook, OnError: sink.OnError}})
		if err := r.Recover(t.Context()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-resumed:
		case <-time.After(20 * time.Second):
			t.Fatalf("recovery %d: the fiber was not resumed (abandoned?)", i)
		}
		r.Close()
		if calls := h.got(); len(calls) != 1 || calls[0].Attempt != 1 {
			t.Fatalf("recovery %d: hook calls %+v, want one of attempt 1", i, calls)
		}
	}
	if ab := e.events(t, fiber.EventAbandoned); len(ab) != 0 {
		t.Fatalf("abandoned: %+v", ab)
	}
	if err := (&fiber.Fiber{}).Stash(t.Context(), 1, fiber.WithAttempts(-1)); !errors.Is(err, fiber.ErrInvalid) {
		t.Fatalf("negative attempts: %v", err)
	}
}

// failingLog fails appends of one event type, as a log whose stream is
// electing a leader fails them.
type failingLog struct {
	fiber.Log
	typ string
}

func (l failingLog) Append(ctx context.Context, e eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	if e.Type == l.typ {
		return 0, fmt.Errorf("eventlog: append %s: %w", e.Type, context.DeadlineExceeded)
	}
	return l.Log.Append(ctx, e, opts...)
}

// A recovery that cannot record its attempt leaves the fiber orphaned and
// says so with ErrOrphaned, which hosts answer by restarting the agent;
// the next recovery, with the log back, resumes it.
func TestRecoverCannotRecordAttempt(t *testing.T) {
	e := newEnv(t)
	crashed(t, e, "F1", `{"step":1}`)
	sink := newErrSink()
	h := &hookRecorder{}
	r, err := fiber.New(fiber.Config{Log: failingLog{Log: e.lg, typ: fiber.EventRecovered}, Table: e.table, Agent: agent,
		Hooks: fiber.Hooks{OnFiberRecovered: h.hook, OnError: sink.OnError}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := sink.next(t); !errors.Is(err, fiber.ErrOrphaned) {
		t.Fatalf("OnError = %v, want ErrOrphaned", err)
	}
	if n := len(h.got()); n != 0 {
		t.Fatalf("the hook ran %d times without a recorded attempt", n)
	}
	if rows := e.rows(t); len(rows) != 1 {
		t.Fatalf("rows = %+v, want the orphaned fiber", rows)
	}
	r2 := e.runner(t, fiber.Config{Agent: agent, Hooks: fiber.Hooks{OnFiberRecovered: h.hook}})
	if err := r2.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := len(h.got()); n != 1 {
		t.Fatalf("hook calls after the log came back = %d", n)
	}
}

// A fiber stopped by the log (a step's op.started not confirmed) is not
// recorded failed: it stays for recovery from its last stash, the host
// hears ErrOrphaned, and the next recovery resumes it.
func TestLogFailureLeavesFiberForRecovery(t *testing.T) {
	e := newEnv(t)
	sink := newErrSink()
	r := e.runner(t, fiber.Config{Hooks: fiber.Hooks{OnError: sink.OnError}})
	err := r.Run(t.Context(), "work", func(ctx context.Context, f *fiber.Fiber) error {
		if err := fiber.Stash(ctx, map[string]int{"step": 7}); err != nil {
			return err
		}
		return fmt.Errorf("fiber: step %q: %w", "s8", eventlog.ErrUnconfirmed)
	})
	if !errors.Is(err, eventlog.ErrUnconfirmed) {
		t.Fatalf("Run = %v", err)
	}
	if !fiber.LogFailed(err) {
		t.Fatal("LogFailed is false for an unconfirmed append")
	}
	if err := sink.next(t); !errors.Is(err, fiber.ErrOrphaned) {
		t.Fatalf("OnError = %v, want ErrOrphaned", err)
	}
	if n := len(e.events(t, fiber.EventFailed)); n != 0 {
		t.Fatalf("%d fiber.failed events for a log failure", n)
	}
	rows := e.rows(t)
	if len(rows) != 1 || string(rows[0].Snapshot) != `{"step":7}` {
		t.Fatalf("rows = %+v, want the fiber with its stash", rows)
	}
	h := &hookRecorder{}
	r2 := e.restart(t).runner(t, fiber.Config{Hooks: fiber.Hooks{OnFiberRecovered: h.hook}})
	if err := r2.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if calls := h.got(); len(calls) != 1 || string(calls[0].Snapshot) != `{"step":7}` {
		t.Fatalf("recovered %+v", calls)
	}
}
