package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/forever-agents/forever/eventlog"
)

// Projection scenario parameters.
const (
	pebbleBatch = 100  // keys per synced batch in the raw Pebble baseline
	catchupRuns = 4    // catch-ups (and raw Pebble runs) per payload size
	fillBatch   = 1000 // events per AppendBatch when filling the log
)

// projectionCatchup appends K events, then times a fresh Projector (new
// name, so it starts from sequence 1) from NewProjector until Ready while it
// writes one row per event, next to raw Pebble writing K keys in synced
// batches of pebbleBatch. Rounds alternate the two; each round writes new
// keys.
func projectionCatchup(ctx context.Context, env *Env) (Result, error) {
	k := env.Count(10000, 10000)
	return perSize(ctx, env, k, projectionCatchupSize)
}

func projectionCatchupSize(ctx context.Context, env *Env, k, size int) ([]Row, error) {
	lg, release, err := env.OpenLog(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	db, releaseDB, err := env.OpenPebble()
	if err != nil {
		return nil, err
	}
	defer releaseDB()

	const agent = "p1"
	ev := benchEvent(agent, size)
	var last eventlog.Seq
	for off := 0; off < k; off += fillBatch {
		evs := make([]eventlog.Event, min(fillBatch, k-off))
		for i := range evs {
			evs[i] = ev
		}
		if last, err = lg.AppendBatch(ctx, evs); err != nil {
			return nil, fmt.Errorf("fill: %w", err)
		}
	}

	value := payload(size)
	var base, sub series
	raw := func(r int) error {
		for off := 0; off < k; off += pebbleBatch {
			b := db.NewBatch()
			for i := off; i < min(off+pebbleBatch, k); i++ {
				if err := b.Set(fmt.Appendf(nil, "r%d/%09d", r, i), value, nil); err != nil {
					b.Close()
					return err
				}
			}
			if err := b.Commit(pebble.Sync); err != nil {
				b.Close()
				return err
			}
			b.Close()
		}
		return nil
	}
	ours := func(r int) error {
		start := time.Now()
		pr, err := lg.NewProjector(eventlog.Projection{
			Name:    fmt.Sprintf("catchup%d", r),
			Version: 1,
			Filter:  eventlog.Filter{Agent: agent},
			Apply: func(b *eventlog.Batch, e eventlog.Event) error {
				return b.Set([]byte(e.ID), e.Data)
			},
		})
		if err != nil {
			return err
		}
		took, err := runUntilReady(ctx, pr, last, start)
		sub.elapsed += took
		sub.ops += k
		return err
	}
	err = alternate(catchupRuns,
		func(r int) error { return base.timed(k, func() error { return raw(r) }) },
		ours,
	)
	if err != nil {
		return nil, err
	}
	return []Row{{
		Figure: "events/s " + sizeName(size), Value: sub.rate(),
		Baseline:      fmt.Sprintf("raw Pebble %d keys/sync", pebbleBatch),
		BaselineValue: base.rate(),
	}}, nil
}

// runUntilReady runs pr until it is ready, checks that it applied up to
// want, and stops it, waiting for Run to return. It returns the time from
// start until ready.
func runUntilReady(ctx context.Context, pr *eventlog.Projector, want eventlog.Seq, start time.Time) (time.Duration, error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- pr.Run(rctx) }()
	var took time.Duration
	select {
	case <-pr.Ready():
		took = time.Since(start)
	case err := <-done:
		return 0, errors.Join(errors.New("projector stopped before ready"), err)
	case <-ctx.Done():
		cancel()
		<-done
		return 0, ctx.Err()
	}
	got := pr.Cursor()
	cancel()
	if err := <-done; err != nil {
		return took, err
	}
	if got != want {
		return took, fmt.Errorf("projector %s ready at cursor %d, want %d", pr.Name(), got, want)
	}
	return took, nil
}
