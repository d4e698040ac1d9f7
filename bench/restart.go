package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/inproc"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// Restart scenario parameters.
const (
	restartAgents  = 100 // agents a filled log's turns are spread over
	restartRounds  = 5   // timed restarts per size and kind, at -n 1 and above
	restartWriters = 4   // concurrent AppendBatch callers filling a log; divides restartAgents
	// restartFlat is the target: restart to ready on a long log within
	// 1.5x of the empty log's. A restart that replayed the log would grow
	// with it and miss by far at 1M; 1.25x missed on noise alone, in a run
	// where 100k events took longer than 1M (30-110 ms each, shared host).
	restartFlat = 1 / 1.5
)

// restartSizes are the log lengths, in events, before -n scales them.
var restartSizes = []int{10_000, 100_000, 1_000_000}

// restartReady measures restart-to-ready of the real agentd binary (go
// build ./agentd/cmd/agentd, run with --sync in the Env's mode) against the
// length of its log: the time from starting the process until GET /readyz
// answers 200, on a data dir whose events stream holds N events, next to
// the same on a data dir with an empty log. The Env's server is not used.
//
// Each log is filled once: agentd is started on a fresh data dir and N
// events (whole tool-calling chat turns, as views-rebuild writes them,
// over restartAgents agents) are appended to its FOREVER_EVENTS stream
// through a Bind Log, restartWriters batches at a time; then it is stopped.
// Before measuring, the scenario waits until the last fill is older than
// JetStream's duplicate window (2m): a stream restored within it reloads
// the message ids of the window, which costs what was written recently,
// not the log's length. Below -n 1 (smoke runs) it does not wait.
//
// One round per log, rounds alternating between logs (the empty one
// included), starts agentd untimed (its views catch up the first time)
// and then times:
//
//   - SIGTERM, then the restart to ready;
//   - SIGKILL, then the restart to ready;
//   - SIGTERM, then an embedded nats-server alone on the same store dir,
//     from NewServer until the events stream's info answers (the share of
//     the restart that is JetStream restoring its streams);
//   - agentd started again untimed and SIGKILLed, then nats-server alone.
//
// The figures are p50 over the rounds. The page cache is warm: the data
// was written or read moments before.
func restartReady(ctx context.Context, env *Env) (Result, error) {
	bin, err := env.AgentdBinary(ctx)
	if err != nil {
		return Result{}, err
	}
	logs := []*restartLog{{size: 0}}
	for _, size := range restartSizes {
		n := env.Count(size, size)
		logs = append(logs, &restartLog{size: n, events: max(7, n/7*7)})
	}
	defer func() {
		for _, l := range logs {
			l.close()
		}
	}()
	var filled time.Time
	for _, l := range logs {
		if err := l.open(ctx, env, bin); err != nil {
			return Result{}, err
		}
		filled = time.Now()
	}
	if err := waitOutDuplicates(ctx, env, "restart-ready", filled); err != nil {
		return Result{}, err
	}
	rounds := max(2, min(restartRounds, env.Count(restartRounds, restartRounds)))
	fns := make([]func(int) error, len(logs))
	for i, l := range logs {
		fns[i] = func(int) error { return l.round(ctx, env) }
	}
	if err := alternate(rounds, fns...); err != nil {
		return Result{}, err
	}
	empty := logs[0]
	var rows []Row
	for _, l := range logs[1:] {
		size := sizeLabel(l.size)
		for _, kind := range []struct {
			name        string
			agentd, srv []time.Duration
			emptyAgentd []time.Duration
			emptySrv    []time.Duration
		}{
			{"SIGTERM", l.term, l.srvTerm, empty.term, empty.srvTerm},
			{"SIGKILL", l.kill, l.srvKill, empty.kill, empty.srvKill},
		} {
			rows = append(rows, Row{
				Figure: fmt.Sprintf("restart to ready p50 ms, %s events, after %s", size, kind.name), Value: millis(percentile(kind.agentd, 50)),
				Baseline: "empty log, p50 ms", BaselineValue: millis(percentile(kind.emptyAgentd, 50)), LowerIsBetter: true,
				Target: restartFlat, TargetNote: "flat: within 1.5x of empty",
			}, Row{
				Figure: fmt.Sprintf("nats-server alone restoring p50 ms, %s events, after %s", size, kind.name), Value: millis(percentile(kind.srv, 50)),
				Baseline: "empty log, p50 ms", BaselineValue: millis(percentile(kind.emptySrv, 50)), LowerIsBetter: true,
			})
		}
	}
	return Result{Rows: rows}, nil
}

// restartLog is one data dir of restart-ready and what was timed on it.
type restartLog struct {
	size   int // nominal events, for the figure's name
	events int // events appended: whole turns
	dir    string
	p      *agentdProc

	term, kill       []time.Duration // agentd restart to ready
	srvTerm, srvKill []time.Duration // nats-server alone
}

// open creates the data dir and fills its log with l.events events, then
// stops agentd.
func (l *restartLog) open(ctx context.Context, env *Env, bin string) (err error) {
	if l.dir, err = env.TempDir(); err != nil {
		return err
	}
	if l.p, err = newAgentdProc(bin, l.dir, env.Mode); err != nil {
		return err
	}
	if _, err := l.p.start(ctx); err != nil {
		return err
	}
	if l.size > 0 {
		start := time.Now()
		if err := fillAgentd(ctx, l.p, l.events, env.Mode); err != nil {
			return fmt.Errorf("fill %d events: %w", l.events, err)
		}
		took := time.Since(start)
		env.Logger.Info("restart-ready: filled", "events", l.events, "took", took.Round(time.Millisecond),
			"events/s", int(float64(l.events)/took.Seconds()))
	}
	return l.p.stop()
}

// waitOutDuplicates waits, at -n 1 and above, until the last write (at
// written) is older than JetStream's duplicate window and a second: a
// stream restored within it reloads the window's message ids (nats-server's
// rebuildDedupe), a cost of what was written recently, not of what is
// stored. Smoke runs (below -n 1) do not wait.
func waitOutDuplicates(ctx context.Context, env *Env, scenario string, written time.Time) error {
	if env.cfg.Scale < 1 {
		return nil
	}
	wait := time.Until(written.Add(eventlog.DefaultDuplicates + time.Second))
	env.Logger.Info(scenario+": waiting out the duplicate window", "wait", wait.Round(time.Second))
	select {
	case <-time.After(wait):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// round times one restart of each kind, as restartReady describes.
func (l *restartLog) round(ctx context.Context, env *Env) error {
	timed := func(into *[]time.Duration, f func() (time.Duration, error)) error {
		d, err := f()
		if err != nil {
			return err
		}
		*into = append(*into, d)
		return nil
	}
	start := func() (time.Duration, error) { return l.p.start(ctx) }
	alone := func() (time.Duration, error) { return serverAlone(ctx, env, l.p.data, l.events) }
	if _, err := l.p.start(ctx); err != nil {
		return err
	}
	if err := l.p.stop(); err != nil {
		return err
	}
	if err := timed(&l.term, start); err != nil {
		return err
	}
	l.p.kill()
	if err := timed(&l.kill, start); err != nil {
		return err
	}
	if err := l.p.stop(); err != nil {
		return err
	}
	if err := timed(&l.srvTerm, alone); err != nil {
		return err
	}
	if _, err := l.p.start(ctx); err != nil {
		return err
	}
	l.p.kill()
	return timed(&l.srvKill, alone)
}

func (l *restartLog) close() {
	if l.p != nil {
		l.p.kill()
	}
	if l.dir != "" {
		os.RemoveAll(l.dir)
	}
}

// fillAgentd appends n events (whole chat turns, n rounded down to 7) to
// the events stream of the running agentd p, spread over restartAgents
// agents, restartWriters batches at a time; each agent's turns stay in
// order (agent and writer are both the turn number modulo).
func fillAgentd(ctx context.Context, p *agentdProc, n int, mode SyncMode) error {
	nc, err := p.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	lg, err := eventlog.Open(ctx, eventlog.Config{Conn: nc, Bind: true, AsyncBatches: mode == SyncInterval})
	if err != nil {
		return err
	}
	defer lg.Close()
	before, err := lg.LastSeq(ctx, eventlog.Filter{})
	if err != nil {
		return err
	}
	turns := n / 7
	eg, ectx := errgroup.WithContext(ctx)
	for w := range restartWriters {
		eg.Go(func() error {
			evs := make([]eventlog.Event, 0, 7*viewsTurnsPB)
			for t := w; t < turns; t += restartWriters {
				evs = append(evs, turnEvents(fmt.Sprintf("r%d", t%restartAgents), t)...)
				if len(evs) == cap(evs) || t+restartWriters >= turns {
					if _, err := lg.AppendBatch(ectx, evs); err != nil {
						return err
					}
					evs = evs[:0]
				}
			}
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return err
	}
	after, err := lg.LastSeq(ctx, eventlog.Filter{})
	if err != nil {
		return err
	}
	if got, want := int(after-before), turns*7; got != want {
		return fmt.Errorf("the events stream grew by %d events, want %d", got, want)
	}
	return nil
}

// serverAlone starts an embedded nats-server with JetStream on agentd's
// store dir, as agentd configures it, and returns the time from NewServer
// until the events stream's info answered with at least want messages.
func serverAlone(ctx context.Context, env *Env, data string, want int) (took time.Duration, err error) {
	began := time.Now()
	s, err := server.NewServer(&server.Options{
		Host:                   "127.0.0.1",
		Port:                   -1,
		JetStream:              true,
		StoreDir:               data,
		SyncAlways:             env.Mode == SyncAlways,
		NoSigs:                 true,
		DisableJetStreamBanner: true,
	})
	if err != nil {
		return 0, fmt.Errorf("bench: nats server: %w", err)
	}
	// After a SIGKILL it warns that it rebuilds stream state: expected.
	s.SetLoggerV2(serverLog{l: env.Logger, noWarn: true}, false, false, false)
	s.Start()
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	if !s.ReadyForConnections(agentdReadyTimeout) {
		return 0, errors.New("bench: nats server on agentd's store not ready")
	}
	nc, err := nats.Connect(s.ClientURL(), inproc.Server(s))
	if err != nil {
		return 0, fmt.Errorf("bench: connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	for {
		n, err := eventMessages(ctx, js)
		if err == nil && n >= uint64(want) {
			return time.Since(began), nil
		}
		if time.Since(began) > agentdReadyTimeout {
			return 0, fmt.Errorf("bench: stream %s not restored after %s: %v", eventlog.DefaultEventsStream, agentdReadyTimeout, err)
		}
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// sizeLabel names a count: 100, 10k, 1M.
func sizeLabel(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// eventMessages returns the messages of the events stream (of a sharded
// log, of every shard).
func eventMessages(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	ls, err := eventlog.ReadStreams(ctx, js)
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, name := range ls.Events {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return 0, err
		}
		n += st.CachedInfo().State.Msgs
	}
	return n, nil
}
