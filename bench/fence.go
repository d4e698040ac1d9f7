package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/forever-agents/forever/eventlog"
)

// fenceOwner grants every agent the same token: the cost measured is the
// fence itself (per-agent serialization, the expected sequence, the writer
// headers), not lease bookkeeping.
type fenceOwner struct{}

func (fenceOwner) Token(string) (eventlog.Token, bool) {
	return eventlog.Token{Node: "bench", Epoch: 1}, true
}

// appendFenced compares a fenced Append (under an Owner, as agentd appends
// in a cluster) with an unfenced one, one call in flight, on logs alike.
func appendFenced(ctx context.Context, env *Env) (Result, error) {
	n := env.Count(2000, 20000)
	return perSize(ctx, env, n, appendFencedSize)
}

func appendFencedSize(ctx context.Context, env *Env, n, size int) ([]Row, error) {
	plain, releasePlain, err := env.OpenLog(ctx)
	if err != nil {
		return nil, err
	}
	defer releasePlain()
	cfg, err := env.LogConfig()
	if err != nil {
		return nil, err
	}
	cfg.Owner = fenceOwner{}
	fenced, err := eventlog.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { fenced.Close(); env.DropLog(cfg) }()

	ev := benchEvent("a1", size)
	unf := func() error { _, err := plain.Append(ctx, ev); return err }
	fen := func() error { _, err := fenced.Append(ctx, ev); return err }
	var base, sub series
	if err := errors.Join((&series{}).sequential(warmup, unf), (&series{}).sequential(warmup, fen)); err != nil {
		return nil, fmt.Errorf("warm up: %w", err)
	}
	rounds := roundsOf(n, singleChunk)
	err = alternate(rounds,
		func(r int) error { return base.sequential(split(n, rounds, r), unf) },
		func(r int) error { return sub.sequential(split(n, rounds, r), fen) },
	)
	if err != nil {
		return nil, err
	}
	sz := sizeName(size)
	const bl = "unfenced Append"
	return []Row{
		{Figure: "msgs/s " + sz, Value: sub.rate(), Baseline: bl, BaselineValue: base.rate()},
		{Figure: "p50 us " + sz, Value: micros(percentile(sub.lat, 50)), Baseline: bl,
			BaselineValue: micros(percentile(base.lat, 50)), LowerIsBetter: true},
		{Figure: "p99 us " + sz, Value: micros(percentile(sub.lat, 99)), Baseline: bl,
			BaselineValue: micros(percentile(base.lat, 99)), LowerIsBetter: true},
	}, nil
}
