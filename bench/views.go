package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/keepalive"
)

// Views scenario parameters.
const (
	viewsAgents  = 64
	viewsRounds  = 2   // rebuilds per variant and size (alternated)
	viewsRYW     = 300 // read-your-writes samples per variant and round (before -n)
	viewsTurnsPB = 140 // chat turns (7 events each) per AppendBatch
)

// viewsSizes are the log sizes rebuilt, in events, before -n scales them.
var viewsSizes = []int{40000, 200000}

// viewsRebuild fills the events stream with chat turns (the seven events of
// a tool-calling turn, as chat records them, over viewsAgents agents), then
// rebuilds the views agentd keeps (chat messages, state, usage, interrupts,
// turns; fiber runs; keepalive schedules; plus chat streams on the empty
// chunks stream) from an empty Pebble, timed from opening the Log until
// every view is ready:
//
//   - ours: one eventlog.Follower feeds the seven events-stream views,
//     as agentd wires them;
//   - baseline: one Projector per view, each with its own consumer and
//     cursor (the wiring before the Follower).
//
// On the 40k log it also times read-your-writes as agentd does it: Append
// one event, then wait for the chat store, the runs table and the
// schedules view to have applied it.
func viewsRebuild(ctx context.Context, env *Env) (Result, error) {
	var res Result
	for i, size := range viewsSizes {
		n := max(7, env.Count(size, size))
		rows, err := viewsRebuildSize(ctx, env, n, i == 0)
		res.Rows = append(res.Rows, rows...)
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

func viewsRebuildSize(ctx context.Context, env *Env, n int, ryw bool) ([]Row, error) {
	cfg, err := env.LogConfig()
	if err != nil {
		return nil, err
	}
	defer env.DropLog(cfg)
	if err := fillTurns(ctx, cfg, n); err != nil {
		return nil, fmt.Errorf("fill: %w", err)
	}
	var ours, base series
	var oursLat, baseLat []time.Duration
	round := func(shared bool, s *series, lat *[]time.Duration) func(int) error {
		return func(int) error {
			took, events, l, err := rebuildViews(ctx, env, cfg, shared, ryw)
			s.elapsed += took
			s.ops += int(events)
			*lat = append(*lat, l...)
			return err
		}
	}
	if err := alternate(viewsRounds, round(true, &ours, &oursLat), round(false, &base, &baseLat)); err != nil {
		return nil, err
	}
	size := fmt.Sprint(n)
	if n >= 1000 {
		size = fmt.Sprintf("%dk", n/1000)
	}
	rows := []Row{{
		Figure: "events/s rebuild " + size, Value: ours.rate(),
		Baseline: "one Projector per view", BaselineValue: base.rate(),
	}}
	if ryw {
		for _, p := range []float64{50, 99} {
			rows = append(rows, Row{
				Figure: fmt.Sprintf("p%.0f us read-your-writes", p), Value: micros(percentile(oursLat, p)), LowerIsBetter: true,
				Baseline: "one Projector per view", BaselineValue: micros(percentile(baseLat, p)),
			})
		}
	}
	return rows, nil
}

// fillTurns appends n events (whole turns, n rounded down to 7) to the
// events stream of cfg.
func fillTurns(ctx context.Context, cfg eventlog.Config, n int) error {
	lg, err := eventlog.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer lg.Close()
	evs := make([]eventlog.Event, 0, 7*viewsTurnsPB)
	for t := range n / 7 {
		evs = append(evs, turnEvents(fmt.Sprintf("v%d", t%viewsAgents), t)...)
		if len(evs) == cap(evs) || t == n/7-1 {
			if _, err = lg.AppendBatch(ctx, evs); err != nil {
				return err
			}
			evs = evs[:0]
		}
	}
	return nil
}

// turnEvents returns the events-stream events of one tool-calling chat
// turn, shaped as chat/testdata/golden/tool_call.jsonl.
func turnEvents(agent string, t int) []eventlog.Event {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(t) * time.Second).Format(time.RFC3339Nano)
	req, fib := fmt.Sprintf("req%d", t), fmt.Sprintf("fib%d", t)
	user, asst, stream := fmt.Sprintf("mu%d", t), fmt.Sprintf("ma%d", t), fmt.Sprintf("s%d", t)
	ev := func(typ, data string) eventlog.Event {
		return eventlog.Event{Agent: agent, Type: typ, Data: json.RawMessage(data)}
	}
	return []eventlog.Event{
		ev("fiber.started", fmt.Sprintf(`{"id":%q,"name":"__chat_turn:%s","createdAt":%q}`, fib, req, now)),
		ev("message.appended", fmt.Sprintf(`{"id":%q,"role":"user","parts":[{"type":"text","text":"weather in Paris?"}],"requestId":%q,"createdAt":%q}`, user, req, now)),
		ev("turn.started", fmt.Sprintf(`{"requestId":%q,"streamId":%q,"messageId":%q,"assistantMessageId":%q,"tools":[{"Name":"get_weather","Description":"Current weather of a city.","Schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]}`, req, stream, user, asst)),
		ev("message.appended", fmt.Sprintf(`{"id":%q,"role":"assistant","parts":[{"type":"text","text":"Let me check the weather."},{"type":"dynamic-tool","toolCallId":"call_1","toolName":"get_weather","state":"input-available","input":{"city":"Paris"}}],"requestId":%q,"createdAt":%q}`, asst, req, now)),
		ev("usage.recorded", fmt.Sprintf(`{"requestId":%q,"input":12,"output":7}`, req)),
		ev("turn.completed", fmt.Sprintf(`{"requestId":%q,"finishReason":"tool_calls"}`, req)),
		ev("fiber.completed", fmt.Sprintf(`{"id":%q}`, fib)),
	}
}

// viewSet is the views of one rebuild, as agentd reads them.
type viewSet struct {
	store *chat.Store
	table *fiber.Table
	sched *keepalive.Scheduler
	run   []interface {
		Run(ctx context.Context) error
	}
	ready []<-chan struct{}
}

// openViews registers the views on lg: on one Follower (shared) or each on
// its own Projector.
func openViews(lg *eventlog.Log, shared bool) (*viewSet, error) {
	vs := &viewSet{}
	noFire := func(context.Context, keepalive.Schedule) error { return nil }
	if shared {
		f, err := lg.NewFollower()
		if err != nil {
			return nil, err
		}
		store, streams, err := chat.AddStore(lg, f)
		if err != nil {
			return nil, err
		}
		if vs.table, err = fiber.AddTable(lg, f); err != nil {
			return nil, err
		}
		if vs.sched, err = keepalive.NewScheduler(keepalive.SchedulerConfig{Log: lg, Fire: noFire, Views: f}); err != nil {
			return nil, err
		}
		vs.store = store
		vs.run = append(vs.run, f, streams)
		vs.ready = append(vs.ready, f.Ready(), streams.Ready())
		return vs, nil
	}
	store, prs, err := chat.OpenStore(lg)
	if err != nil {
		return nil, err
	}
	table, runs, err := fiber.OpenTable(lg)
	if err != nil {
		return nil, err
	}
	if vs.sched, err = keepalive.NewScheduler(keepalive.SchedulerConfig{Log: lg, Fire: noFire}); err != nil {
		return nil, err
	}
	vs.store, vs.table = store, table
	for _, pr := range append(prs, runs, vs.sched.Projector()) {
		vs.run = append(vs.run, pr)
		vs.ready = append(vs.ready, pr.Ready())
	}
	return vs, nil
}

// start runs the views and waits until every one is ready; stop ends them
// and returns their errors. On an error the views are stopped already.
func (vs *viewSet) start(ctx context.Context) (stop func() error, err error) {
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, len(vs.run))
	for _, r := range vs.run {
		go func() { done <- r.Run(rctx) }()
	}
	stop = func() error {
		cancel()
		var errs []error
		for range vs.run {
			errs = append(errs, <-done)
		}
		return errors.Join(errs...)
	}
	for _, ch := range vs.ready {
		select {
		case <-ch:
		case err := <-done:
			done <- err
			return nil, errors.Join(errors.New("views stopped before ready"), stop())
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), stop())
		}
	}
	return stop, nil
}

// waitFor waits as agentd does for a write at seq to be readable.
func (vs *viewSet) waitFor(ctx context.Context, seq eventlog.Seq) error {
	if err := vs.store.WaitFor(ctx, seq); err != nil {
		return err
	}
	if err := vs.table.WaitFor(ctx, seq); err != nil {
		return err
	}
	return vs.sched.WaitFor(ctx, seq)
}

// rebuildViews opens a Log on cfg's streams with an empty Pebble, builds the
// views and returns the time from open until all are ready and the events
// they applied; with ryw, then the latencies of viewsRYW appends each waited
// for.
func rebuildViews(ctx context.Context, env *Env, cfg eventlog.Config, shared, ryw bool) (took time.Duration, events eventlog.Seq, lat []time.Duration, err error) {
	if cfg.Dir, err = env.TempDir(); err != nil {
		return 0, 0, nil, err
	}
	defer os.RemoveAll(cfg.Dir)
	start := time.Now()
	lg, err := eventlog.Open(ctx, cfg)
	if err != nil {
		return 0, 0, nil, err
	}
	defer lg.Close()
	want, err := lg.LastSeq(ctx, eventlog.Filter{})
	if err != nil {
		return 0, 0, nil, err
	}
	vs, err := openViews(lg, shared)
	if err != nil {
		return 0, 0, nil, err
	}
	stop, err := vs.start(ctx)
	if err != nil {
		return 0, 0, nil, err
	}
	took = time.Since(start)
	if err := vs.waitFor(ctx, want); err != nil {
		return took, want, nil, errors.Join(err, stop())
	}
	if ryw {
		for i := range max(10, env.Count(viewsRYW, viewsRYW)) {
			t := time.Now()
			seq, err := lg.Append(ctx, eventlog.Event{Agent: "v0", Type: "usage.recorded",
				Data: json.RawMessage(fmt.Sprintf(`{"requestId":"ryw%d","input":1,"output":1}`, i))})
			if err == nil {
				err = vs.waitFor(ctx, seq)
			}
			if err != nil {
				return took, want, lat, errors.Join(err, stop())
			}
			lat = append(lat, time.Since(t))
		}
	}
	return took, want, lat, stop()
}
