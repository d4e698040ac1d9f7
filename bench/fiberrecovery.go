package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"golang.org/x/sync/errgroup"
)

// Recovery scenario parameters.
const (
	orphanAgent    = "o1"
	orphanStarters = 32 // concurrent Runner.Go calls while making orphans
	recoverWithin  = time.Second
)

// fiberRecovery times a restart after a crash that left orphans, once with a
// fresh Pebble dir (the runs projection is rebuilt from the log) and once
// with the crashed process's dir. A first process starts the orphans, each
// of which stashes once and blocks, and is closed under them. Then a new
// Log is opened on the same streams, and two spans are timed:
//
//   - open to ready: eventlog.Open until the runs projection is ready, next
//     to a raw ordered consumer replaying the same events;
//   - ready to hooks: from readiness, through Runner.Recover, until the
//     hook (which returns nil) was called for every orphan (target: within
//     1 s), and until Recover returned (every orphan completed). Next to it,
//     one goroutine per orphan doing what Recover must for each: a raw sync
//     PublishMsg the size of fiber.recovered (all acknowledged: the hooks'
//     baseline), then one the size of fiber.completed (Recover's baseline).
//
// Each baseline runs once before and once after the restart (B S B) and the
// mean is reported.
func fiberRecovery(ctx context.Context, env *Env) (Result, error) {
	n := env.Count(1000, 1000)
	var res Result
	for _, fresh := range []bool{true, false} {
		rows, err := fiberRecoveryDir(ctx, env, n, fresh)
		res.Rows = append(res.Rows, rows...)
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

func fiberRecoveryDir(ctx context.Context, env *Env, n int, fresh bool) ([]Row, error) {
	variant := "same pebble"
	if fresh {
		variant = "new pebble"
	}
	cfg, err := env.LogConfig()
	if err != nil {
		return nil, err
	}
	defer env.DropLog(cfg)
	last, err := makeOrphans(ctx, env, cfg, n)
	if err != nil {
		return nil, fmt.Errorf("%s: make orphans: %w", variant, err)
	}
	restart := cfg
	if fresh {
		if restart.Dir, err = env.TempDir(); err != nil {
			return nil, err
		}
		defer os.RemoveAll(restart.Dir)
	}
	prefix, releaseRaw, err := env.RawStream(ctx)
	if err != nil {
		return nil, err
	}
	defer releaseRaw()

	id := nuid.Next()
	recovered := payload(envelopeSize(orphanAgent, fiber.EventRecovered, mustJSON(map[string]any{"id": id, "attempt": 1})))
	completed := payload(envelopeSize(orphanAgent, fiber.EventCompleted, mustJSON(map[string]any{"id": id})))
	var replay, firstRaw, allRaw time.Duration
	baselines := func() error {
		took, err := rawReplay(ctx, env.JS, cfg.EventsStream, cfg.Prefix+".evt.>", int(last))
		if err != nil {
			return fmt.Errorf("raw replay: %w", err)
		}
		replay += took / 2
		first, all, err := rawConcurrent(ctx, env.JS, prefix+"."+orphanAgent, n, recovered, completed)
		if err != nil {
			return fmt.Errorf("raw concurrent publish: %w", err)
		}
		firstRaw, allRaw = firstRaw+first/2, allRaw+all/2
		return nil
	}
	if err := baselines(); err != nil {
		return nil, err
	}
	m, err := restartAndRecover(ctx, env, restart, n)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", variant, err)
	}
	if err := baselines(); err != nil {
		return nil, err
	}
	hooks := fmt.Sprintf("ready to all %d hooks ms, %s", n, variant)
	return []Row{
		{Figure: "open to ready ms, " + variant, Value: millis(m.ready), LowerIsBetter: true,
			Baseline: fmt.Sprintf("raw ordered replay, %d events", last), BaselineValue: millis(replay)},
		{Figure: hooks, Value: millis(m.hooks), LowerIsBetter: true,
			Baseline: "1 s", BaselineValue: millis(recoverWithin),
			Target: 1, TargetNote: "within 1 s of readiness"},
		{Figure: hooks, Value: millis(m.hooks), LowerIsBetter: true,
			Baseline: fmt.Sprintf("raw %d concurrent PublishMsg", n), BaselineValue: millis(firstRaw)},
		{Figure: "ready to Recover returned ms, " + variant, Value: millis(m.recovered), LowerIsBetter: true,
			Baseline: fmt.Sprintf("raw %d concurrent 2x PublishMsg", n), BaselineValue: millis(allRaw)},
	}, nil
}

// makeOrphans is the process that crashes: on a Log opened with cfg it
// starts n fibers of orphanAgent, each stashing once and then blocking, and
// closes the Runner under them (interrupted fibers keep their rows), once
// the runs table has applied every event. It returns the log's last
// sequence.
func makeOrphans(ctx context.Context, env *Env, cfg eventlog.Config, n int) (last eventlog.Seq, err error) {
	lg, err := eventlog.Open(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, lg.Close()) }()
	runs, err := openRuns(ctx, lg)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, runs.stop()) }()
	var sink errSink
	r, err := fiber.New(fiber.Config{Log: lg, Table: runs.table, Agent: orphanAgent, Logger: env.Logger, Hooks: fiber.Hooks{OnError: sink.add}})
	if err != nil {
		return 0, err
	}
	closed := false
	defer func() {
		if !closed {
			r.Close()
		}
	}()

	var stashed sync.WaitGroup
	var stashErrs errSink
	block := make(chan struct{}) // never closed: the process dies first
	orphan := func(ctx context.Context, f *fiber.Fiber) error {
		err := f.Stash(ctx, newSnapshot(1))
		stashed.Done()
		if err != nil {
			stashErrs.add(ctx, err)
			return err
		}
		select {
		case <-block:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	stashed.Add(n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(orphanStarters)
	for range n {
		g.Go(func() error {
			_, err := r.Go(gctx, "orphan", orphan)
			if err != nil {
				stashed.Done() // the function never ran
			}
			return err
		})
	}
	err = g.Wait()
	stashed.Wait()
	if err = errors.Join(err, stashErrs.err()); err != nil {
		return 0, err
	}
	if last, err = lg.LastSeq(ctx, eventlog.Filter{}); err != nil {
		return 0, err
	}
	if err := runs.table.WaitFor(ctx, last); err != nil {
		return 0, err
	}
	// The crash: every fiber is still blocked.
	closed = true
	r.Close()
	if err := sink.err(); err != nil {
		return 0, err
	}
	rows, err := runs.table.Rows(orphanAgent)
	if err != nil {
		return 0, err
	}
	if len(rows) != n {
		return 0, fmt.Errorf("%d rows after the crash, want %d", len(rows), n)
	}
	return last, nil
}

// recoveryTimes are the spans restartAndRecover measures.
type recoveryTimes struct {
	ready     time.Duration // eventlog.Open until the runs table is ready
	hooks     time.Duration // ready until the hook was called for every orphan
	recovered time.Duration // ready until Recover returned
}

// restartAndRecover is the restarted process: it opens a Log with cfg, runs
// the runs projection until ready and recovers n orphans with a hook that
// counts its calls and returns nil.
func restartAndRecover(ctx context.Context, env *Env, cfg eventlog.Config, n int) (m recoveryTimes, err error) {
	start := time.Now()
	lg, err := eventlog.Open(ctx, cfg)
	if err != nil {
		return m, err
	}
	defer func() { err = errors.Join(err, lg.Close()) }()
	runs, err := openRuns(ctx, lg)
	if err != nil {
		return m, err
	}
	defer func() { err = errors.Join(err, runs.stop()) }()
	ready := time.Now()
	m.ready = ready.Sub(start)

	var calls, noSnapshot atomic.Int64
	allCalled := make(chan time.Time, 1)
	hook := func(_ context.Context, rec fiber.Recovered) error {
		if len(rec.Snapshot) == 0 {
			noSnapshot.Add(1)
		}
		if calls.Add(1) == int64(n) {
			allCalled <- time.Now()
		}
		return nil
	}
	var sink errSink
	r, err := fiber.New(fiber.Config{Log: lg, Table: runs.table, Agent: orphanAgent, Logger: env.Logger,
		Hooks: fiber.Hooks{OnFiberRecovered: hook, OnError: sink.add}})
	if err != nil {
		return m, err
	}
	defer r.Close()
	err = r.Recover(ctx)
	m.recovered = time.Since(ready)
	if err = errors.Join(err, sink.err()); err != nil {
		return m, err
	}
	select {
	case t := <-allCalled:
		m.hooks = t.Sub(ready)
	default:
		return m, fmt.Errorf("recovery hook called %d times, want %d", calls.Load(), n)
	}
	if k := noSnapshot.Load(); k > 0 {
		return m, fmt.Errorf("%d of %d recovered fibers without their snapshot", k, n)
	}
	return m, nil
}

// rawReplay times a raw ordered consumer delivering the first n messages of
// stream on subject, the way the event log's Follow reads.
func rawReplay(ctx context.Context, js jetstream.JetStream, stream, subject string, n int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := time.Now()
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return 0, err
	}
	msgs, err := cons.Messages(jetstream.PullMaxMessages(512))
	if err != nil {
		return 0, err
	}
	defer msgs.Stop()
	for range n {
		if _, err := msgs.Next(jetstream.NextContext(ctx)); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// rawConcurrent starts n goroutines that each publish first and then second
// to subject with sync PublishMsg. It returns the time until every first
// publish was acknowledged and until all were.
func rawConcurrent(ctx context.Context, js jetstream.JetStream, subject string, n int, first, second []byte) (firstDone, allDone time.Duration, err error) {
	var acked atomic.Int64
	firstAt := make(chan time.Time, 1)
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for range n {
		g.Go(func() error {
			if _, err := js.PublishMsg(gctx, &nats.Msg{Subject: subject, Data: first}); err != nil {
				return err
			}
			if acked.Add(1) == int64(n) {
				firstAt <- time.Now()
			}
			_, err := js.PublishMsg(gctx, &nats.Msg{Subject: subject, Data: second})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return 0, 0, err
	}
	allDone = time.Since(start)
	return (<-firstAt).Sub(start), allDone, nil
}

// millis converts d to milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
