package fiber_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/verify"
)

// TestProgressResetsAttemptsByDefault: the attempt cap counts recoveries
// without progress, for every fiber and without WithAttempts. A fiber that
// completes a step or changes its snapshot in each run, then dies, is
// recovered more than MaxAttempts times and never abandoned, every
// recovery being attempt 1; one that makes no progress (nothing, its own
// snapshot stashed again, a step answered from its record) is abandoned
// after MaxAttempts. Each "process" is a Runner on a fresh Pebble over the
// same JetStream; closing it under the running fiber is the crash. verify
// accepts every log.
func TestProgressResetsAttemptsByDefault(t *testing.T) {
	const max = 2
	const runs = 2*max + 2
	cases := []struct {
		name     string
		progress bool
		// body is the run of recovery n (from 1) up to its crash.
		body func(ctx context.Context, n int, rec fiber.Recovered) error
	}{
		{"new step", true, func(ctx context.Context, n int, _ fiber.Recovered) error {
			_, err := fiber.StepJSON(ctx, fmt.Sprintf("s%d", n), func(context.Context, string) (int, error) { return n, nil })
			return err
		}},
		{"step with ThenStash", true, func(ctx context.Context, n int, _ fiber.Recovered) error {
			_, err := fiber.StepJSON(ctx, fmt.Sprintf("s%d", n), func(context.Context, string) (int, error) { return n, nil },
				fiber.ThenStash(n))
			return err
		}},
		{"new snapshot", true, func(ctx context.Context, n int, _ fiber.Recovered) error {
			return fiber.Stash(ctx, n)
		}},
		{"nothing", false, func(context.Context, int, fiber.Recovered) error { return nil }},
		{"same snapshot", false, func(ctx context.Context, _ int, rec fiber.Recovered) error {
			return fiber.Stash(ctx, rec.Snapshot)
		}},
		{"recorded step", false, func(ctx context.Context, n int, _ fiber.Recovered) error {
			// Completed in the first run only; later runs get its record.
			_, err := fiber.StepJSON(ctx, "once", func(context.Context, string) (int, error) { return 7, nil },
				fiber.ThenStash(1))
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			crashed(t, e, "F1", `0`)
			var recovered []int // attempt of each recovery
			abandoned := 0
			for n := 1; n <= runs && abandoned == 0; n++ {
				sink := newErrSink()
				var r *fiber.Runner
				reached := make(chan struct{})
				h := &hookRecorder{answer: func(ctx context.Context, _ int, rec fiber.Recovered) error {
					return r.GoResume(ctx, rec, func(ctx context.Context, f *fiber.Fiber) error {
						if err := tc.body(ctx, n, rec); err != nil {
							return err
						}
						close(reached)
						<-ctx.Done() // the process dies
						return ctx.Err()
					})
				}}
				r = e.restart(t).runner(t, fiber.Config{MaxAttempts: max, Hooks: fiber.Hooks{OnFiberRecovered: h.hook, OnError: sink.OnError}})
				if err := r.Recover(t.Context()); err != nil {
					t.Fatal(err)
				}
				for _, c := range h.got() {
					recovered = append(recovered, c.Attempt)
				}
				if len(h.got()) == 0 {
					err := sink.next(t)
					var ae *fiber.AbandonedError
					if !errors.As(err, &ae) || !errors.Is(err, fiber.ErrAttemptsExhausted) || ae.Attempts != max {
						t.Fatalf("run %d: OnError = %v, want abandoned after %d attempts", n, err, max)
					}
					abandoned = n
					break
				}
				select {
				case <-reached:
				case err := <-sink.ch:
					t.Fatalf("run %d: %v", n, err)
				case <-time.After(20 * time.Second):
					t.Fatalf("run %d: the fiber did not reach its crash point", n)
				}
				r.Close()
			}
			if tc.progress {
				if abandoned != 0 {
					t.Fatalf("abandoned at run %d after recoveries %v, though it made progress in each", abandoned, recovered)
				}
				for i, a := range recovered {
					if a != 1 {
						t.Fatalf("recovery %d was attempt %d (all %v), want 1: progress resets the count", i+1, a, recovered)
					}
				}
				if len(recovered) != runs {
					t.Fatalf("recoveries %v, want %d", recovered, runs)
				}
			} else if abandoned == 0 {
				t.Fatalf("never abandoned after recoveries %v, though it made no progress", recovered)
			}
			if !tc.progress && tc.name != "recorded step" && len(recovered) != max {
				t.Fatalf("recoveries %v before abandonment, want %d", recovered, max)
			}
			rep, err := verify.Check(t.Context(), e.lg, verify.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK() {
				t.Fatalf("verify:\n%s", rep)
			}
		})
	}
}

// A fiber that keeps its own budget (WithAttempts) keeps it: its count is
// recorded as it says, and the default reset stays off for the rest of the
// run, so a step it completes afterwards does not undo its count.
func TestWithAttemptsTurnsTheResetOff(t *testing.T) {
	e := newEnv(t)
	crashed(t, e, "F1", `0`)
	var r *fiber.Runner
	done := make(chan error, 1)
	h := &hookRecorder{answer: func(ctx context.Context, _ int, rec fiber.Recovered) error {
		return r.Resume(ctx, rec, func(ctx context.Context, f *fiber.Fiber) error {
			if err := fiber.Stash(ctx, 1, fiber.WithAttempts(rec.Attempt)); err != nil {
				return err
			}
			_, err := fiber.StepJSON(ctx, "s", func(context.Context, string) (int, error) { return 1, nil })
			done <- err
			return errBoom // leave the fiber failed: its events are all in
		})
	}}
	r = e.restart(t).runner(t, fiber.Config{Hooks: fiber.Hooks{OnFiberRecovered: h.hook, OnError: func(context.Context, error) {}}})
	if err := r.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ops := e.events(t, fiber.EventOpCompleted)
	if len(ops) != 1 {
		t.Fatalf("op.completed events: %d", len(ops))
	}
	var d struct{ Attempts *int }
	if err := json.Unmarshal(ops[0].Data, &d); err != nil || d.Attempts != nil {
		t.Fatalf("op.completed after WithAttempts = %s, want no attempts of its own", ops[0].Data)
	}
}
