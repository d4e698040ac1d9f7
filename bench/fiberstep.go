package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/forever-agents/forever/fiber"
)

// fiberStep measures a durable step followed by a stash, the unit of work
// of a long-running fiber, inside one fiber: fiber.Step with ThenStash
// (op.started, then op.completed carrying the snapshot: two synced
// writes) next to fiber.Step and then Stash (three synced writes), and
// steps chained with ThenStash and ThenStep (each op.completed also
// carries the next step's op.started: one synced write per step) next to
// ThenStash alone. The step's function does nothing, so the figures are
// the writes' cost.
//
// It also times a fiber's start to the end of its first step (Go until
// the step returned: op.completed durable): started WithSnapshot and
// FirstStep (fiber.started carries the first snapshot and the step's
// op.started: two synced writes) next to Go, Stash and Step (four).
func fiberStep(ctx context.Context, env *Env) (Result, error) {
	n := env.Count(2000, 10000)
	g, err := openFiberRig(ctx, env, "st1")
	if err != nil {
		return Result{}, err
	}
	defer g.close()
	r, sink := g.r, &g.sink
	var ours, base, chain series
	err = r.Run(ctx, "stepper", func(ctx context.Context, f *fiber.Fiber) error {
		k := 0
		noop := func(context.Context, string) (json.RawMessage, error) { return json.RawMessage(`"ok"`), nil }
		together := func() error {
			k++
			_, err := fiber.Step(ctx, fmt.Sprintf("s%d", k), noop, fiber.ThenStash(newSnapshot(k)))
			return err
		}
		c := 0
		chained := func() error {
			c++
			_, err := fiber.Step(ctx, fmt.Sprintf("c%d", c), noop, fiber.ThenStash(newSnapshot(c)), fiber.ThenStep(fmt.Sprintf("c%d", c+1)))
			return err
		}
		apart := func() error {
			k++
			if _, err := fiber.Step(ctx, fmt.Sprintf("s%d", k), noop); err != nil {
				return err
			}
			return f.Stash(ctx, newSnapshot(k))
		}
		if err := errors.Join((&series{}).sequential(warmup, together), (&series{}).sequential(warmup, apart),
			(&series{}).sequential(warmup, chained)); err != nil {
			return fmt.Errorf("warm up: %w", err)
		}
		rounds := roundsOf(n, fiberChunk)
		return alternate(rounds,
			func(r int) error { return ours.sequential(split(n, rounds, r), together) },
			func(r int) error { return chain.sequential(split(n, rounds, r), chained) },
			func(r int) error { return base.sequential(split(n, rounds, r), apart) },
		)
	})
	if err = errors.Join(err, sink.err()); err != nil {
		return Result{}, err
	}
	var first, firstBase series
	stepped := make(chan error, 1)
	noop := func(context.Context, string) (json.RawMessage, error) { return json.RawMessage(`"ok"`), nil }
	merged := func() error {
		if _, err := r.Go(ctx, "first", func(ctx context.Context, f *fiber.Fiber) error {
			_, err := fiber.Step(ctx, "s", noop)
			stepped <- err
			return err
		}, fiber.WithSnapshot(newSnapshot(0)), fiber.FirstStep("s")); err != nil {
			return err
		}
		return <-stepped
	}
	separate := func() error {
		if _, err := r.Go(ctx, "first", func(ctx context.Context, f *fiber.Fiber) error {
			if err := f.Stash(ctx, newSnapshot(0)); err != nil {
				stepped <- err
				return err
			}
			_, err := fiber.Step(ctx, "s", noop)
			stepped <- err
			return err
		}); err != nil {
			return err
		}
		return <-stepped
	}
	m := max(20, n/10)
	if err := alternate(roundsOf(m, fiberChunk),
		func(r int) error { return first.sequential(split(m, roundsOf(m, fiberChunk), r), merged) },
		func(r int) error { return firstBase.sequential(split(m, roundsOf(m, fiberChunk), r), separate) },
	); err != nil {
		return Result{}, err
	}
	r.Wait()
	const bl = "Step, then Stash"
	return Result{Rows: []Row{
		{Figure: "p50 us step+stash", Value: micros(percentile(ours.lat, 50)), Baseline: bl,
			BaselineValue: micros(percentile(base.lat, 50)), LowerIsBetter: true},
		{Figure: "p99 us step+stash", Value: micros(percentile(ours.lat, 99)), Baseline: bl,
			BaselineValue: micros(percentile(base.lat, 99)), LowerIsBetter: true},
		{Figure: "steps/s with stash", Value: ours.rate(), Baseline: bl, BaselineValue: base.rate()},
		{Figure: "p50 us chained step+stash", Value: micros(percentile(chain.lat, 50)), Baseline: "step+stash",
			BaselineValue: micros(percentile(ours.lat, 50)), LowerIsBetter: true},
		{Figure: "p99 us chained step+stash", Value: micros(percentile(chain.lat, 99)), Baseline: "step+stash",
			BaselineValue: micros(percentile(ours.lat, 99)), LowerIsBetter: true},
		{Figure: "p50 us start to first step", Value: micros(percentile(first.lat, 50)), LowerIsBetter: true,
			Baseline: "Go, Stash, Step", BaselineValue: micros(percentile(firstBase.lat, 50))},
		{Figure: "p99 us start to first step", Value: micros(percentile(first.lat, 99)), LowerIsBetter: true,
			Baseline: "Go, Stash, Step", BaselineValue: micros(percentile(firstBase.lat, 99))},
	}}, nil
}
