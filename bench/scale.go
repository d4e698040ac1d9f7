package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/keepalive"
)

// Scale scenario parameters, before -n scales them.
const (
	scaleAgents    = 100_000   // agents registered (a finished fiber each)
	scaleActive    = 1_000     // agents activated
	scaleSchedules = 1_000_000 // schedules far in the future
	scaleDue       = 200       // schedules due soon, whose lateness is measured
	scaleTickers   = 1_000     // agents the schedules belong to
	scalePB        = 1_000     // events per AppendBatch
)

// scaleScenario measures one agentd node, in process, as the number of
// agents and schedules grows (a Host with one "tick" type, whose ping
// verb answers nothing and whose schedule callback records its lateness;
// its own embedded server):
//
//   - heap per registered (idle, never activated) agent, next to the heap
//     per active agent, after scaleAgents agents are registered (a
//     finished fiber each, appended to the log) and scaleActive of them
//     activated by a "ping" command; runtime.GC before each reading;
//   - activation latency, p50 and p99: a command to an idle agent, next to
//     the same command to the same agents once active;
//   - schedule firing lateness, p50 and p99, of scaleDue schedules due
//     within 1-3 s, with scaleSchedules other schedules due in 30 days
//     stored, next to the same with none stored;
//   - restart to ready (a graceful stop, then a new Daemon on the same data
//     dir until Ready) with those schedules, next to the restart before
//     they were stored, each once the last write is older than the
//     duplicate window (at -n 1 and above).
func scaleScenario(ctx context.Context, env *Env) (Result, error) {
	dir, err := env.TempDir()
	if err != nil {
		return Result{}, err
	}
	sn := &scaleNode{dir: dir, fired: make(chan time.Duration, 4*scaleDue)}
	if err := sn.start(ctx); err != nil {
		return Result{}, err
	}
	defer sn.stop()
	agents, active := env.Count(scaleAgents, scaleAgents), env.Count(scaleActive, scaleActive)
	schedules, tickers := env.Count(scaleSchedules, scaleSchedules), max(1, env.Count(scaleTickers, scaleTickers))

	heapEmpty := heap()
	if err := sn.appendAll(ctx, agents, func(i int) []eventlog.Event {
		a := fmt.Sprintf("tick:a%d", i)
		return []eventlog.Event{
			{Agent: a, Type: "fiber.started", Data: json.RawMessage(`{"id":"f","name":"steps","createdAt":"2026-01-02T03:04:05Z"}`)},
			{Agent: a, Type: "fiber.completed", Data: json.RawMessage(`{"id":"f"}`)},
		}
	}); err != nil {
		return Result{}, fmt.Errorf("register agents: %w", err)
	}
	heapIdle := heap()
	var cold, warm []time.Duration
	for pass, lat := range []*[]time.Duration{&cold, &warm} {
		for i := range active {
			a := fmt.Sprintf("tick:a%d", i*(agents/active))
			t := time.Now()
			if _, err := sn.nc.RequestWithContext(ctx, "forever.cmd."+a+".ping", nil); err != nil {
				return Result{}, fmt.Errorf("status %s (pass %d): %w", a, pass, err)
			}
			*lat = append(*lat, time.Since(t))
		}
	}
	heapActive := heap()

	baseLate, err := sn.lateness(ctx, tickers)
	if err != nil {
		return Result{}, err
	}
	baseRestart, err := sn.restart(ctx, env)
	if err != nil {
		return Result{}, err
	}
	far := time.Now().Add(30 * 24 * time.Hour)
	if err := sn.appendAll(ctx, schedules, func(i int) []eventlog.Event {
		return []eventlog.Event{scheduleSet(fmt.Sprintf("tick:t%d", i%tickers), fmt.Sprintf("far%d", i), far.Add(time.Duration(i)*time.Millisecond))}
	}); err != nil {
		return Result{}, fmt.Errorf("store schedules: %w", err)
	}
	late, err := sn.lateness(ctx, tickers)
	if err != nil {
		return Result{}, err
	}
	restart, err := sn.restart(ctx, env)
	if err != nil {
		return Result{}, err
	}

	perIdle := (float64(heapIdle) - float64(heapEmpty)) / float64(agents)
	perActive := (float64(heapActive) - float64(heapIdle)) / float64(active)
	ag, sc := sizeLabel(agents), sizeLabel(schedules)
	return Result{Rows: []Row{
		{Figure: fmt.Sprintf("bytes heap per idle agent, %s registered", ag), Value: perIdle, LowerIsBetter: true,
			Baseline: "per active agent", BaselineValue: perActive},
		{Figure: fmt.Sprintf("p50 us activation, %s registered", ag), Value: micros(percentile(cold, 50)), LowerIsBetter: true,
			Baseline: "the same command, agent active", BaselineValue: micros(percentile(warm, 50))},
		{Figure: fmt.Sprintf("p99 us activation, %s registered", ag), Value: micros(percentile(cold, 99)), LowerIsBetter: true,
			Baseline: "the same command, agent active", BaselineValue: micros(percentile(warm, 99))},
		{Figure: fmt.Sprintf("p50 ms schedule lateness, %s stored", sc), Value: millis(percentile(late, 50)), LowerIsBetter: true,
			Baseline: "no other schedule stored", BaselineValue: millis(percentile(baseLate, 50))},
		{Figure: fmt.Sprintf("p99 ms schedule lateness, %s stored", sc), Value: millis(percentile(late, 99)), LowerIsBetter: true,
			Baseline: "no other schedule stored", BaselineValue: millis(percentile(baseLate, 99))},
		{Figure: fmt.Sprintf("ms restart to ready, %s schedules", sc), Value: millis(restart), LowerIsBetter: true,
			Baseline: "before they were stored", BaselineValue: millis(baseRestart)},
	}}, nil
}

// heap is the live heap after a collection.
func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func scheduleSet(agent, id string, at time.Time) eventlog.Event {
	data, _ := json.Marshal(keepalive.Schedule{ID: id, Agent: agent, Callback: "tick", Kind: keepalive.KindAt,
		At: at, NextAt: at, CreatedAt: time.Now()})
	return eventlog.Event{Agent: agent, Type: keepalive.EventSet, Data: data}
}

// scaleNode is the in-process agentd of the scale scenario.
type scaleNode struct {
	dir     string
	fired   chan time.Duration // lateness of each tick callback
	written time.Time          // the last append

	d      *agentd.Daemon
	nc     *nats.Conn
	lg     *eventlog.Log
	cancel context.CancelFunc
	done   chan error
}

// tickAgent records the lateness of its schedules.
type tickAgent struct{ fired chan time.Duration }

func (a *tickAgent) HandleCommand(context.Context, host.Command) (any, error) { return nil, nil }
func (a *tickAgent) OnSchedule(_ context.Context, s keepalive.Schedule) error {
	a.fired <- time.Since(s.NextAt)
	return nil
}

func (sn *scaleNode) start(ctx context.Context) error {
	d, err := agentd.New(agentd.Config{
		DataDir: sn.dir, HTTPAddr: "127.0.0.1:0", NATSListen: "127.0.0.1:0",
		IdleTimeout: time.Hour, CompactEvents: -1, JetStreamMaxStore: 64 << 30,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	h := host.New(host.Config{})
	if err := h.Register("tick", func(context.Context, *host.Env) (host.Agent, error) {
		return &tickAgent{fired: sn.fired}, nil
	}, "ping"); err != nil {
		return err
	}
	if err := h.Attach(d); err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	sn.d, sn.cancel, sn.done = d, cancel, make(chan error, 1)
	go func() { sn.done <- d.Run(rctx) }()
	deadline := time.Now().Add(2 * time.Minute)
	for !d.Ready() {
		select {
		case err := <-sn.done:
			sn.done <- err
			return fmt.Errorf("agentd stopped: %w", err)
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("agentd not ready in 2m")
		}
	}
	if sn.nc, err = nats.Connect(d.NATSURL()); err != nil {
		return err
	}
	sn.lg, err = eventlog.Open(ctx, eventlog.Config{Conn: sn.nc, Bind: true})
	return err
}

func (sn *scaleNode) stop() {
	if sn.lg != nil {
		sn.lg.Close()
	}
	if sn.nc != nil {
		sn.nc.Close()
	}
	if sn.cancel != nil {
		sn.cancel()
		<-sn.done
	}
}

// restart stops the node gracefully and returns the time until a new one
// on the same data dir is ready. At full scale it first waits out
// JetStream's duplicate window after the last write (waitOutDuplicates):
// a stream restored inside it reloads the window's message ids, a cost of
// the recent writes, not of what is stored.
func (sn *scaleNode) restart(ctx context.Context, env *Env) (time.Duration, error) {
	if err := waitOutDuplicates(ctx, env, "scale", sn.written); err != nil {
		return 0, err
	}
	sn.stop()
	t := time.Now()
	if err := sn.start(ctx); err != nil {
		return 0, err
	}
	return time.Since(t), nil
}

// appendAll appends the events of n items in batches, then waits until
// agentd's views applied them.
func (sn *scaleNode) appendAll(ctx context.Context, n int, item func(i int) []eventlog.Event) error {
	evs := make([]eventlog.Event, 0, scalePB)
	var last eventlog.Seq
	var err error
	for i := range n {
		evs = append(evs, item(i)...)
		if len(evs) >= scalePB || i == n-1 {
			if last, err = sn.lg.AppendBatch(ctx, evs); err != nil {
				return err
			}
			sn.written = time.Now()
			evs = evs[:0]
		}
	}
	return sn.waitViews(ctx, last)
}

// waitViews polls agentd's metrics until the runs view's cursor reaches seq.
func (sn *scaleNode) waitViews(ctx context.Context, seq eventlog.Seq) error {
	url := "http://" + sn.d.HTTPAddr() + "/metrics"
	const want = `forever_eventlog_projection_cursor{projection="runs"} `
	for {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var cur float64
		for line := range strings.Lines(string(body)) {
			line = strings.TrimSpace(line)
			if len(line) > len(want) && line[:len(want)] == want {
				fmt.Sscan(line[len(want):], &cur)
			}
		}
		if eventlog.Seq(cur) >= seq {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// lateness stores scaleDue schedules due 1 to 3 s from now over tickers
// agents and returns how late each callback ran.
func (sn *scaleNode) lateness(ctx context.Context, tickers int) ([]time.Duration, error) {
	for len(sn.fired) > 0 {
		<-sn.fired
	}
	t0 := time.Now().Add(time.Second)
	var evs []eventlog.Event
	for i := range scaleDue {
		at := t0.Add(time.Duration(i) * 2 * time.Second / scaleDue)
		evs = append(evs, scheduleSet(fmt.Sprintf("tick:t%d", i%tickers), fmt.Sprintf("due%d-%d", t0.UnixNano(), i), at))
	}
	if _, err := sn.lg.AppendBatch(ctx, evs); err != nil {
		return nil, err
	}
	sn.written = time.Now()
	var late []time.Duration
	timeout := time.After(60 * time.Second)
	for len(late) < scaleDue {
		select {
		case d := <-sn.fired:
			late = append(late, d)
		case <-timeout:
			return nil, fmt.Errorf("%d of %d schedules fired in 60s", len(late), scaleDue)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return late, nil
}
