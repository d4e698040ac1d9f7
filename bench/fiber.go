package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
)

// Fiber scenario parameters.
const (
	fiberChunk    = 100 // fibers (or stashes) per series per round
	snapshotSize  = 200 // bytes of the snapshot fiber-stash stashes
	stashTarget   = 1 / 1.3
	stashTargetOK = "within 1.3x"
)

// fiberRun compares Runner.Run of an empty function (fiber.started, then
// fiber.completed, each a sync append) with two raw sync PublishMsg in
// sequence of the same body sizes, and with two eventlog.Append of the same
// data: the first gap is the whole fiber stack, the second what fiber adds
// on top of the log. The runs projection runs meanwhile, as it does in a
// process.
func fiberRun(ctx context.Context, env *Env) (Result, error) {
	n := env.Count(2000, 10000)
	g, err := openFiberRig(ctx, env, "r1")
	if err != nil {
		return Result{}, err
	}
	defer g.close()
	lg, prefix, r, sink := g.lg, g.prefix, g.r, &g.sink

	// What Run appends: the data of fiber.started and fiber.completed, and
	// the size of each stored message body.
	now := time.Now().UTC()
	startedData := mustJSON(map[string]any{"id": nuid.Next(), "name": "bench", "createdAt": now})
	completedData := mustJSON(map[string]any{"id": nuid.Next()})
	started := payload(envelopeSize("r1", fiber.EventStarted, startedData))
	completed := payload(envelopeSize("r1", fiber.EventCompleted, completedData))
	subject := prefix + ".r1"
	raw := func() error {
		if _, err := env.JS.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: started}); err != nil {
			return err
		}
		_, err := env.JS.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: completed})
		return err
	}
	// Another agent, and types the runs projection ignores.
	evStarted := eventlog.Event{Agent: "r2", Type: "bench.started", Data: startedData}
	evCompleted := eventlog.Event{Agent: "r2", Type: "bench.completed", Data: completedData}
	appends := func() error {
		if _, err := lg.Append(ctx, evStarted); err != nil {
			return err
		}
		_, err := lg.Append(ctx, evCompleted)
		return err
	}
	empty := func(context.Context, *fiber.Fiber) error { return nil }
	ours := func() error { return r.Run(ctx, "bench", empty) }

	if err := errors.Join((&series{}).sequential(warmup, raw), (&series{}).sequential(warmup, ours), (&series{}).sequential(warmup, appends)); err != nil {
		return Result{}, fmt.Errorf("warm up: %w", err)
	}
	var base, sub, app series
	rounds := roundsOf(n, fiberChunk)
	err = alternate(rounds,
		func(r int) error { return base.sequential(split(n, rounds, r), raw) },
		func(r int) error { return sub.sequential(split(n, rounds, r), ours) },
		func(r int) error { return app.sequential(split(n, rounds, r), appends) },
	)
	if err = errors.Join(err, sink.err()); err != nil {
		return Result{}, err
	}
	const bl, bla = "raw 2x PublishMsg", "2x Append"
	return Result{Rows: []Row{
		{Figure: "fibers/s", Value: sub.rate(), Baseline: bl, BaselineValue: base.rate()},
		{Figure: "p50 us", Value: micros(percentile(sub.lat, 50)), Baseline: bl,
			BaselineValue: micros(percentile(base.lat, 50)), LowerIsBetter: true},
		{Figure: "p99 us", Value: micros(percentile(sub.lat, 99)), Baseline: bl,
			BaselineValue: micros(percentile(base.lat, 99)), LowerIsBetter: true},
		{Figure: "fibers/s", Value: sub.rate(), Baseline: bla, BaselineValue: app.rate()},
		{Figure: "p50 us", Value: micros(percentile(sub.lat, 50)), Baseline: bla,
			BaselineValue: micros(percentile(app.lat, 50)), LowerIsBetter: true},
	}}, nil
}

// benchSnapshot is what fiber-stash stashes: snapshotSize bytes of JSON.
type benchSnapshot struct {
	Step    int    `json:"step"`
	Summary string `json:"summary"`
}

func newSnapshot(step int) benchSnapshot {
	s := benchSnapshot{Step: step}
	s.Summary = strings.Repeat("s", max(0, snapshotSize-len(mustJSON(s))))
	return s
}

// fiberStash times Fiber.Stash of a snapshotSize-byte snapshot, many times
// in one long-running fiber, next to raw sync PublishMsg of snapshotSize
// bytes (the target: stash within 1.5x) and to eventlog.Append of the data
// Stash appends. The three series alternate inside the fiber.
func fiberStash(ctx context.Context, env *Env) (Result, error) {
	n := env.Count(3000, 20000)
	g, err := openFiberRig(ctx, env, "s1")
	if err != nil {
		return Result{}, err
	}
	defer g.close()
	lg, prefix, r, sink := g.lg, g.prefix, g.r, &g.sink

	data, subject := payload(snapshotSize), prefix+".s1"
	raw := func() error {
		_, err := env.JS.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: data})
		return err
	}
	ev := eventlog.Event{Agent: "s2", Type: "bench.stashed",
		Data: mustJSON(map[string]any{"id": nuid.Next(), "snapshot": newSnapshot(0)})}
	appendOne := func() error {
		_, err := lg.Append(ctx, ev)
		return err
	}
	var base, sub, app series
	err = r.Run(ctx, "stasher", func(ctx context.Context, f *fiber.Fiber) error {
		step := 0
		stash := func() error { step++; return f.Stash(ctx, newSnapshot(step)) }
		if err := errors.Join((&series{}).sequential(warmup, raw), (&series{}).sequential(warmup, stash), (&series{}).sequential(warmup, appendOne)); err != nil {
			return fmt.Errorf("warm up: %w", err)
		}
		rounds := roundsOf(n, fiberChunk)
		return alternate(rounds,
			func(r int) error { return base.sequential(split(n, rounds, r), raw) },
			func(r int) error { return sub.sequential(split(n, rounds, r), stash) },
			func(r int) error { return app.sequential(split(n, rounds, r), appendOne) },
		)
	})
	if err = errors.Join(err, sink.err()); err != nil {
		return Result{}, err
	}
	sz := sizeName(snapshotSize)
	const bl = "raw PublishMsg"
	return Result{Rows: []Row{
		{Figure: "p50 us " + sz, Value: micros(percentile(sub.lat, 50)), Baseline: bl,
			BaselineValue: micros(percentile(base.lat, 50)), LowerIsBetter: true,
			Target: stashTarget, TargetNote: stashTargetOK},
		{Figure: "p99 us " + sz, Value: micros(percentile(sub.lat, 99)), Baseline: bl,
			BaselineValue: micros(percentile(base.lat, 99)), LowerIsBetter: true},
		{Figure: "stashes/s " + sz, Value: sub.rate(), Baseline: bl, BaselineValue: base.rate()},
		{Figure: "p50 us " + sz, Value: micros(percentile(sub.lat, 50)), Baseline: "Append, same data",
			BaselineValue: micros(percentile(app.lat, 50)), LowerIsBetter: true},
		{Figure: "p99 us " + sz, Value: micros(percentile(sub.lat, 99)), Baseline: "Append, same data",
			BaselineValue: micros(percentile(app.lat, 99)), LowerIsBetter: true},
	}}, nil
}

// runsTable is the runs projection of one Log, running in a goroutine the
// scenario owns.
type runsTable struct {
	table  *fiber.Table
	pr     *eventlog.Projector
	cancel context.CancelFunc
	done   chan error
	err    error // Run's error once received from done
	ended  bool
}

// startRuns registers the runs projection on lg and starts running it.
func startRuns(ctx context.Context, lg *eventlog.Log) (*runsTable, error) {
	table, pr, err := fiber.OpenTable(lg)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	t := &runsTable{table: table, pr: pr, cancel: cancel, done: make(chan error, 1)}
	go func() { t.done <- pr.Run(rctx) }()
	return t, nil
}

// openRuns is startRuns followed by ready.
func openRuns(ctx context.Context, lg *eventlog.Log) (*runsTable, error) {
	t, err := startRuns(ctx, lg)
	if err != nil {
		return nil, err
	}
	if err := t.ready(ctx); err != nil {
		return nil, errors.Join(err, t.stop())
	}
	return t, nil
}

// ready waits until the projection has caught up with the log.
func (t *runsTable) ready(ctx context.Context) error {
	select {
	case <-t.pr.Ready():
		return nil
	case err := <-t.done:
		t.err, t.ended = err, true
		return errors.Join(errors.New("runs projection stopped before ready"), err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop stops the projection and waits for Run to return, returning its
// error.
func (t *runsTable) stop() error {
	t.cancel()
	if !t.ended {
		t.err, t.ended = <-t.done, true
	}
	return t.err
}

// errSink collects the errors a Runner reports to Hooks.OnError.
// fiberRig is what the fiber scenarios run on: a Log on the Env's server
// (and the raw stream's subject prefix), the runs table running, and a
// Runner for one agent whose errors go to sink.
type fiberRig struct {
	lg     *eventlog.Log
	prefix string
	r      *fiber.Runner
	sink   errSink
	close  func()
}

func openFiberRig(ctx context.Context, env *Env, agent string) (*fiberRig, error) {
	lg, prefix, release, err := env.OpenLogAndRaw(ctx)
	if err != nil {
		return nil, err
	}
	runs, err := openRuns(ctx, lg)
	if err != nil {
		release()
		return nil, err
	}
	g := &fiberRig{lg: lg, prefix: prefix}
	g.r, err = fiber.New(fiber.Config{Log: lg, Table: runs.table, Agent: agent, Logger: env.Logger, Hooks: fiber.Hooks{OnError: g.sink.add}})
	if err != nil {
		runs.stop()
		release()
		return nil, err
	}
	g.close = func() {
		g.r.Close()
		runs.stop()
		release()
	}
	return g, nil
}

type errSink struct {
	mu   sync.Mutex
	errs []error
}

func (s *errSink) add(_ context.Context, err error) {
	s.mu.Lock()
	s.errs = append(s.errs, err)
	s.mu.Unlock()
}

// err returns the first few errors collected and how many there were.
func (s *errSink) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%d errors reported to OnError, first: %w", len(s.errs), s.errs[0])
}

// envelopeSize returns the size of the message body Append stores for an
// event of agent and typ with data.
func envelopeSize(agent, typ string, data json.RawMessage) int {
	return len(mustJSON(eventlog.Event{Agent: agent, Type: typ, ID: nuid.Next(), Time: time.Now().UTC(), Data: data}))
}

// mustJSON encodes v, which must be encodable.
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
