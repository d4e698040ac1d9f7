package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/forever-agents/forever/eventlog"
	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"
)

// Group commit scenario parameters and targets (issue 27).
const (
	groupAgents = 100 // concurrent writers, one agent each
	// groupTarget: 100 agents' appends/s at least this many times the
	// same 100 writers publishing raw, each publish its own fsync.
	groupTarget = 2
	// groupLoneTarget: a lone writer's Append p50 within 1.2x of a raw
	// synced publish (it was 0.87-0.94x before group commit): a lone
	// append never waits for company.
	groupLoneTarget = 1 / 1.2
)

// groupCommit measures the group commit of events across agents on a
// fenced Log (as agentd writes: every append under an Owner, expecting its
// agent's last sequence):
//
//   - groupAgents goroutines, each appending to its own agent one event at
//     a time, all at once; beside the same goroutines publishing raw to
//     their own subjects of a raw stream, one synced publish at a time
//     each (before group commit, every append was that: its own fsync);
//   - one writer alone: Append p50 beside a raw synced publish p50.
func groupCommit(ctx context.Context, env *Env) (Result, error) {
	n := env.Count(6000, 30000) // appends per series
	cfg, err := env.LogConfig()
	if err != nil {
		return Result{}, err
	}
	cfg.Owner = fenceOwner{}
	lg, err := eventlog.Open(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	defer func() { lg.Close(); env.DropLog(cfg) }()
	prefix, releaseRaw, err := env.RawStream(ctx)
	if err != nil {
		return Result{}, err
	}
	defer releaseRaw()

	ev := benchEvent("g", 64)
	all := func(k int, op func(w int) error) error {
		g, _ := errgroup.WithContext(ctx)
		for w := range groupAgents {
			g.Go(func() error {
				for range split(k, groupAgents, w) {
					if err := op(w); err != nil {
						return err
					}
				}
				return nil
			})
		}
		return g.Wait()
	}
	ours := func(w int) error {
		e := ev
		e.Agent = "g" + strconv.Itoa(w)
		_, err := lg.Append(ctx, e)
		return err
	}
	raw := func(w int) error {
		_, err := env.JS.PublishMsg(ctx, &nats.Msg{Subject: prefix + ".g" + strconv.Itoa(w), Data: ev.Data})
		return err
	}
	if err := errors.Join(all(groupAgents, ours), all(groupAgents, raw)); err != nil {
		return Result{}, fmt.Errorf("warm up: %w", err)
	}
	var sub, base series
	rounds := roundsOf(n, 2000)
	err = alternate(rounds,
		func(r int) error { k := split(n, rounds, r); return sub.timed(k, func() error { return all(k, ours) }) },
		func(r int) error { k := split(n, rounds, r); return base.timed(k, func() error { return all(k, raw) }) },
	)
	if err != nil {
		return Result{}, err
	}

	lone := func() error { return ours(0) }
	loneRaw := func() error { return raw(0) }
	var l, lb series
	m := env.Count(1000, 5000)
	lrounds := roundsOf(m, singleChunk)
	err = alternate(lrounds,
		func(r int) error { return l.sequential(split(m, lrounds, r), lone) },
		func(r int) error { return lb.sequential(split(m, lrounds, r), loneRaw) },
	)
	if err != nil {
		return Result{}, err
	}
	fig := fmt.Sprintf("fenced appends/s, %d agents at once", groupAgents)
	return Result{Rows: []Row{
		{Figure: fig, Value: sub.rate(), Baseline: fmt.Sprintf("raw synced PublishMsg/s, %d writers at once", groupAgents),
			BaselineValue: base.rate(), Target: groupTarget, TargetNote: "fsyncs shared: 2x"},
		{Figure: "lone writer's fenced Append p50 us", Value: micros(percentile(l.lat, 50)), Baseline: "raw synced PublishMsg p50 us",
			BaselineValue: micros(percentile(lb.lat, 50)), LowerIsBetter: true, Target: groupLoneTarget, TargetNote: "within 1.2x"},
		{Figure: "lone writer's fenced Append p99 us", Value: micros(percentile(l.lat, 99)), Baseline: "raw synced PublishMsg p99 us",
			BaselineValue: micros(percentile(lb.lat, 99)), LowerIsBetter: true},
	}}, nil
}
