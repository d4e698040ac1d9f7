package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
)

// Tool scenario parameters.
const (
	toolCallSteps  = 4   // tool steps of a tool-call turn (K)
	toolTurnSteps  = 10  // tool steps of a tool-turn turn
	toolAgentCount = 100 // agents of tool-agents at -n 1 and above
	toolAgentSteps = 3   // tool steps of each tool-agents turn
	toolChunk      = 10  // turns per series per round
	toolWarmup     = 3   // untimed turns per series before measuring
)

// Tool scenario targets (issues 27 and 39).
const (
	toolCallTarget   = 0.5 // a durable server tool call within 2x a bare fiber.Step, p50 and p99
	toolCallTargetOK = "within 2x a bare step"
	// plainTurnPublishes: a plain turn on the local model within this many
	// synced-publish latencies at p50 (issue 39; 15 in issue 27).
	plainTurnPublishes = 12
	// toolTurnPlain: a 10-tool turn within this many plain turns at p50.
	toolTurnPlain = 12
	// toolAgentsShare: tool calls/s of 100 agents at least this share of
	// one-at-a-time synced publishes/s: 2,000/s against the about 5,000
	// fsyncs/s of the disk the issue measured (5x the 404/s of then).
	toolAgentsShare = 0.4
	// toolAgentsRate: tool calls/s of 100 agents on one node (issue 39),
	// whatever the disk.
	toolAgentsRate = 2000
)

// toolCall measures what one durable server tool call adds to a chat turn
// on the local model (Rate -1): its tool-input chunks made durable, the
// fiber step's op.started and op.completed, the tool-output chunk, and the
// extra model step the call costs (step chunks, the turn's stashes, the
// next request). Beside it, fiber.Step of a no-op function returning what
// the no-op tool's step records, in one long-running fiber: the bare
// durable step.
//
// Method: turns with toolCallSteps "/tool noop {}" lines alternate with
// turns that call no tool, each on a fresh agent (its own Runner and Agent
// on the shared log, store and batcher), so every turn starts from the same
// empty conversation. A turn is timed from Send to the end of its fiber.
// The tool's share is (K-tool turn - 0-tool turn) / K, from the means and
// from the medians: everything a turn does once (Send, turn.started,
// fiber.started and completed, the answer, turn.completed) cancels out. A
// second, direct measure needs no subtraction: a wrapper around the model
// times each gap from the end of one model call (the chat layer stops
// reading) to the start of the next; in a tool turn each such gap is one
// tool call and the step boundary after it. That gives p50 and p99 per call,
// but leaves out the stash the chat layer makes inside each model call when
// it sees a new response id, which the subtraction includes.
//
// Samples: 480 turns a series, 1,920 gaps and as many bare steps. A p99
// of 120 samples (30 turns, until stop 57) is about their second largest,
// and the ratio of two such figures swung from 1.0x to 2.9x between runs
// of one build; at 1,920 each it held at 1.4-1.5x. A run takes about 8 s.
func toolCall(ctx context.Context, env *Env) (Result, error) {
	n := max(2, env.Count(480, 600)) // turns per series
	g, err := openToolRig(ctx, env)
	if err != nil {
		return Result{}, err
	}
	defer g.close()
	bare, err := g.runner("bare")
	if err != nil {
		return Result{}, err
	}
	defer bare.Close()

	noTools, withTools := newStepTimer(), newStepTimer()
	var zero, kTools, step series
	var zeroRecs, kRecs, stepRecs storedRecords
	err = bare.Run(ctx, "bare", func(ctx context.Context, _ *fiber.Fiber) error {
		i := 0
		bareStep := func() error {
			i++
			_, err := fiber.Step(ctx, "noop-"+strconv.Itoa(i), func(context.Context, string) (json.RawMessage, error) {
				return noopResult, nil
			})
			return err
		}
		turns := func(s *series, p *stepTimer, k, count int) error {
			for range count {
				if err := g.freshTurn(ctx, s, p, k); err != nil {
					return err
				}
			}
			return nil
		}
		// counted runs f and adds the records it stored to c.
		counted := func(c *storedRecords, f func() error) error {
			before, err := g.stored(ctx)
			if err != nil {
				return err
			}
			if err := f(); err != nil {
				return err
			}
			after, err := g.stored(ctx)
			c.events += after.events - before.events
			c.chunks += after.chunks - before.chunks
			return err
		}
		var w series
		if err := errors.Join(turns(&w, newStepTimer(), 0, toolWarmup), turns(&w, newStepTimer(), toolCallSteps, toolWarmup),
			(&series{}).sequential(warmup, bareStep)); err != nil {
			return fmt.Errorf("warm up: %w", err)
		}
		rounds := roundsOf(n, toolChunk)
		// Bare steps are many times faster: toolCallSteps per turn.
		return alternate(rounds,
			func(r int) error {
				return counted(&stepRecs, func() error { return step.sequential(toolCallSteps*split(n, rounds, r), bareStep) })
			},
			func(r int) error {
				return counted(&zeroRecs, func() error { return turns(&zero, noTools, 0, split(n, rounds, r)) })
			},
			func(r int) error {
				return counted(&kRecs, func() error { return turns(&kTools, withTools, toolCallSteps, split(n, rounds, r)) })
			},
		)
	})
	if err = errors.Join(err, g.check(ctx)); err != nil {
		return Result{}, err
	}
	perCall := func(k, z time.Duration) float64 { return micros(k-z) / toolCallSteps }
	mean := func(s *series) time.Duration {
		if s.ops == 0 {
			return 0
		}
		return s.elapsed / time.Duration(s.ops)
	}
	k := strconv.Itoa(toolCallSteps)
	const bl = "bare fiber.Step"
	return Result{Rows: []Row{
		{Figure: "tool call us, (" + k + "-tool turn - 0-tool turn)/" + k + ", mean", Value: perCall(mean(&kTools), mean(&zero)),
			Baseline: bl + ", mean us", BaselineValue: micros(mean(&step)), LowerIsBetter: true},
		{Figure: "tool call us, (" + k + "-tool turn - 0-tool turn)/" + k + ", p50", Value: perCall(percentile(kTools.lat, 50), percentile(zero.lat, 50)),
			Baseline: bl + ", p50 us", BaselineValue: micros(percentile(step.lat, 50)), LowerIsBetter: true,
			Target: toolCallTarget, TargetNote: toolCallTargetOK},
		{Figure: "tool call us between model calls, p50", Value: micros(percentile(withTools.gaps, 50)),
			Baseline: bl + ", p50 us", BaselineValue: micros(percentile(step.lat, 50)), LowerIsBetter: true,
			Target: toolCallTarget, TargetNote: toolCallTargetOK},
		{Figure: "tool call us between model calls, p99", Value: micros(percentile(withTools.gaps, 99)),
			Baseline: bl + ", p99 us", BaselineValue: micros(percentile(step.lat, 99)), LowerIsBetter: true,
			Target: toolCallTarget, TargetNote: toolCallTargetOK},
		{Figure: k + "-tool turn p50 us", Value: micros(percentile(kTools.lat, 50)),
			Baseline: "0-tool turn p50 us", BaselineValue: micros(percentile(zero.lat, 50)), LowerIsBetter: true},
		// Every record is its own fsync under sync always unless an atomic
		// batch carries it: what a tool call waits for beyond its writes.
		{Figure: "records stored per tool call, events", Value: perCallRecs(kRecs.events, zeroRecs.events, kTools.ops, zero.ops),
			Baseline: "records per bare fiber.Step", BaselineValue: perStep(stepRecs.events, step.ops), LowerIsBetter: true},
		{Figure: "records stored per tool call, chunks", Value: perCallRecs(kRecs.chunks, zeroRecs.chunks, kTools.ops, zero.ops),
			Baseline: "records per bare fiber.Step", BaselineValue: perStep(stepRecs.events, step.ops), LowerIsBetter: true},
	}}, nil
}

// storedRecords counts records stored in the events and chunks streams.
type storedRecords struct{ events, chunks int64 }

// stored returns the last sequences of the rig's events and chunks
// streams: nothing deletes during a scenario, so their differences are
// the records stored between two calls.
func (g *toolRig) stored(ctx context.Context) (storedRecords, error) {
	ev, err := g.lg.LastSeq(ctx, eventlog.Filter{})
	if err != nil {
		return storedRecords{}, err
	}
	ch, err := g.lg.LastSeq(ctx, eventlog.Filter{Chunks: true})
	return storedRecords{events: int64(ev), chunks: int64(ch)}, err
}

// perCallRecs is the records a tool call adds: (k-tool turns' per turn -
// 0-tool turns' per turn) / toolCallSteps.
func perCallRecs(k, zero int64, kTurns, zeroTurns int) float64 {
	if kTurns == 0 || zeroTurns == 0 {
		return 0
	}
	return (float64(k)/float64(kTurns) - float64(zero)/float64(zeroTurns)) / toolCallSteps
}

func perStep(recs int64, steps int) float64 {
	if steps == 0 {
		return 0
	}
	return float64(recs) / float64(steps)
}

// toolTurn times a turn of toolTurnSteps no-op tool calls and the answer
// quoting them (toolTurnSteps+1 model calls) on the local model (Rate -1),
// from Send to the end of its fiber, each on a fresh agent; beside the
// local model streaming the same toolTurnSteps+1 requests directly, with no
// chat layer (the requests a warm-up turn sent, as the chat layer built
// them). The ratio is the share of a tool turn that is the model's own.
func toolTurn(ctx context.Context, env *Env) (Result, error) {
	n := max(2, env.Count(25, 150)) // turns per series
	g, err := openToolRig(ctx, env)
	if err != nil {
		return Result{}, err
	}
	defer g.close()

	var w series
	rec := newStepTimer()
	rec.record = true
	if err := g.freshTurn(ctx, &w, rec, toolTurnSteps); err != nil {
		return Result{}, fmt.Errorf("warm up: %w", err)
	}
	reqs := rec.reqs
	if got, want := len(reqs), toolTurnSteps+1; got != want {
		return Result{}, fmt.Errorf("a %d-tool turn made %d model calls, want %d", toolTurnSteps, got, want)
	}
	local := llm.NewLocal(llm.LocalConfig{Rate: -1})
	direct := func() error {
		for _, req := range reqs {
			for _, err := range local.Stream(ctx, req) {
				if err != nil {
					return err
				}
			}
		}
		return nil
	}
	turns := func(s *series, count int) error {
		for range count {
			if err := g.freshTurn(ctx, s, newStepTimer(), toolTurnSteps); err != nil {
				return err
			}
		}
		return nil
	}
	if err := errors.Join(turns(&w, toolWarmup-1), (&series{}).sequential(warmup, direct)); err != nil {
		return Result{}, fmt.Errorf("warm up: %w", err)
	}
	prefix, releaseRaw, err := env.RawStream(ctx)
	if err != nil {
		return Result{}, err
	}
	defer releaseRaw()
	rawPublish := func() error {
		_, err := env.JS.PublishMsg(ctx, &nats.Msg{Subject: prefix + ".p", Data: []byte(`{"type":"text-delta"}`)})
		return err
	}
	var plainRecs storedRecords // events records of the timed plain turns
	var plainWrites int64       // and the writes they waited for
	plainTurns := func(s *series, count int) error {
		before, err := g.stored(ctx)
		if err != nil {
			return err
		}
		w0 := g.writes.n.Load()
		for range count {
			if err := g.freshTurn(ctx, s, newStepTimer(), 0); err != nil {
				return err
			}
		}
		after, err := g.stored(ctx)
		plainRecs.events += after.events - before.events
		plainWrites += g.writes.n.Load() - w0
		return err
	}
	if err := errors.Join(plainTurns(&w, toolWarmup), (&series{}).sequential(warmup, rawPublish)); err != nil {
		return Result{}, fmt.Errorf("warm up: %w", err)
	}
	plainRecs, plainWrites = storedRecords{}, 0
	var sub, base, plain, pub series
	rounds := roundsOf(n, toolChunk)
	err = alternate(rounds,
		func(r int) error { return base.sequential(split(n, rounds, r), direct) },
		func(r int) error { return turns(&sub, split(n, rounds, r)) },
		func(r int) error { return plainTurns(&plain, split(n, rounds, r)) },
		func(r int) error { return pub.sequential(4*split(n, rounds, r), rawPublish) },
	)
	if err = errors.Join(err, g.check(ctx)); err != nil {
		return Result{}, err
	}
	fig := fmt.Sprintf("%d-tool turn", toolTurnSteps)
	bl := fmt.Sprintf("llm.Local streaming its %d requests", toolTurnSteps+1)
	return Result{Rows: []Row{
		{Figure: fig + " p50 us", Value: micros(percentile(sub.lat, 50)), Baseline: bl + ", p50 us",
			BaselineValue: micros(percentile(base.lat, 50)), LowerIsBetter: true},
		{Figure: fig + " p99 us", Value: micros(percentile(sub.lat, 99)), Baseline: bl + ", p99 us",
			BaselineValue: micros(percentile(base.lat, 99)), LowerIsBetter: true},
		{Figure: fig + " p50 us", Value: micros(percentile(sub.lat, 50)), Baseline: "plain turn (no tool) p50 us",
			BaselineValue: micros(percentile(plain.lat, 50)), LowerIsBetter: true,
			Target: 1.0 / toolTurnPlain, TargetNote: fmt.Sprintf("within %dx a plain turn", toolTurnPlain)},
		{Figure: "plain turn (no tool) p50 us", Value: micros(percentile(plain.lat, 50)), Baseline: "raw synced PublishMsg p50 us",
			BaselineValue: micros(percentile(pub.lat, 50)), LowerIsBetter: true,
			Target: 1.0 / plainTurnPublishes, TargetNote: fmt.Sprintf("within %d synced publishes", plainTurnPublishes)},
		// The events-stream writes a plain turn waits for (Append,
		// AppendAll, AppendBatch; its chunk flushes aside), against the
		// events records it stores: the rest share a write.
		{Figure: "awaited event-log writes per plain turn", Value: perStep(plainWrites, len(plain.lat)),
			Baseline: "events records stored per plain turn", BaselineValue: perStep(plainRecs.events, len(plain.lat)), LowerIsBetter: true},
	}}, nil
}

// toolAgents measures tool calls per second across toolAgentCount agents, each
// its own Runner and Agent on one shared log, store and batcher, all
// running turns of toolAgentSteps no-op tool calls on the local model
// (Rate -1) at once, each agent one turn after another; beside fiber.Step
// per second with the same agents' Runners each running one fiber of as
// many no-op steps, all at once. The rate counts tool calls only, so each
// turn's own costs (Send, turn events, the answer step) weigh on it. Below
// -n 1 the agents are fewer (-n 0.1: 10, and at least 4), so that a smoke
// run stays short; the figure names how many.
func toolAgents(ctx context.Context, env *Env) (Result, error) {
	agents := min(toolAgentCount, max(4, env.Count(toolAgentCount, toolAgentCount)))
	calls := env.Count(600, 2400)
	turns := max(1, calls/(agents*toolAgentSteps)) // per agent
	g, err := openToolRig(ctx, env)
	if err != nil {
		return Result{}, err
	}
	defer g.close()
	hosts := make([]*toolHost, agents)
	for i := range hosts {
		h, err := g.host(fmt.Sprintf("ta%d", i), newStepTimer())
		if err != nil {
			return Result{}, err
		}
		defer h.close()
		hosts[i] = h
	}
	all := func(f func(h *toolHost) error) error {
		eg, _ := errgroup.WithContext(ctx)
		for _, h := range hosts {
			eg.Go(func() error { return f(h) })
		}
		return eg.Wait()
	}
	ours := func(k int) error {
		return all(func(h *toolHost) error {
			for range k {
				if err := g.turn(ctx, h, toolAgentSteps); err != nil {
					return err
				}
			}
			return nil
		})
	}
	round := 0
	bare := func(k int) error {
		round++
		return all(func(h *toolHost) error {
			return h.r.Run(ctx, "bare-"+strconv.Itoa(round), func(ctx context.Context, _ *fiber.Fiber) error {
				for i := range k * toolAgentSteps {
					if _, err := fiber.Step(ctx, "noop-"+strconv.Itoa(i), func(context.Context, string) (json.RawMessage, error) {
						return noopResult, nil
					}); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
	if err := errors.Join(ours(1), bare(1)); err != nil {
		return Result{}, fmt.Errorf("warm up: %w", err)
	}
	prefix, releaseRaw, err := env.RawStream(ctx)
	if err != nil {
		return Result{}, err
	}
	defer releaseRaw()
	var pub series
	rawPublish := func() error {
		_, err := env.JS.PublishMsg(ctx, &nats.Msg{Subject: prefix + ".p", Data: noopResult})
		return err
	}
	if err := (&series{}).sequential(warmup, rawPublish); err != nil {
		return Result{}, fmt.Errorf("warm up: %w", err)
	}
	var sub, base series
	rounds := roundsOf(turns, 2)
	err = alternate(rounds,
		func(r int) error { return pub.sequential(max(200, env.Count(500, 2000)/rounds), rawPublish) },
		func(r int) error {
			k := split(turns, rounds, r)
			if k == 0 {
				return nil
			}
			return base.timed(agents*toolAgentSteps*k, func() error { return bare(k) })
		},
		func(r int) error {
			k := split(turns, rounds, r)
			if k == 0 {
				return nil
			}
			return env.profiled(func() error {
				return sub.timed(agents*toolAgentSteps*k, func() error { return ours(k) })
			})
		},
	)
	if err = errors.Join(err, g.check(ctx)); err != nil {
		return Result{}, err
	}
	fig := fmt.Sprintf("tool calls/s, %d agents x %d-tool turns", agents, toolAgentSteps)
	// What the process's CPU allows: the same agents on every core the
	// machine has, nothing else running. Below the goal, the CPU a tool
	// call costs bounds the rate whatever the locks and the disk do.
	ceiling := 0.0
	if c := sub.cpuPerOp(); c > 0 {
		ceiling = float64(runtime.NumCPU()) * 1e6 / c
	}
	return Result{Rows: []Row{
		{Figure: fig, Value: sub.rate(), Baseline: fmt.Sprintf("bare fiber.Step/s, %d agents' fibers", agents), BaselineValue: base.rate()},
		{Figure: fig, Value: sub.rate(), Baseline: "raw synced PublishMsg/s, one at a time (the disk's fsyncs/s)", BaselineValue: pub.rate(),
			Target: toolAgentsShare, TargetNote: "2,000/s at 5,000 fsyncs/s"},
		{Figure: fig, Value: sub.rate(), Baseline: "goal, tool calls/s", BaselineValue: toolAgentsRate,
			Target: 1, TargetNote: "at least 2,000/s"},
		{Figure: "process CPU per tool call, us", Value: sub.cpuPerOp(), Baseline: "process CPU per bare fiber.Step, us",
			BaselineValue: base.cpuPerOp(), LowerIsBetter: true},
		// What paces the garbage collector, whose cycles make a tool
		// call's p99 (docs/benchmarks.md, stop 63).
		{Figure: "process heap KiB allocated per tool call", Value: sub.allocPerOp() / 1024, Baseline: "per bare fiber.Step, KiB",
			BaselineValue: base.allocPerOp() / 1024, LowerIsBetter: true},
		{Figure: fmt.Sprintf("tool calls/s the CPU allows (%d cores / CPU per call)", runtime.NumCPU()), Value: ceiling,
			Baseline: "goal, tool calls/s", BaselineValue: toolAgentsRate},
	}}, nil
}

// noopResult is what the step of a no-op tool call records: the tool
// result with its output, {}.
var noopResult = json.RawMessage(`{"output":{}}`)

// toolRig is one process's worth of chat parts on a fresh Log: the runs
// table and the chat store projected, a running chunk batcher, and the
// no-op tool, which counts its runs.
type toolRig struct {
	env     *Env
	lg      *eventlog.Log
	writes  *writeCounter // lg as the agents and fibers write through it
	table   *fiber.Table  // the runs table, on the rig's Follower
	store   *chat.Store
	prs     *projectors
	batcher *eventlog.Batcher
	tools   *chat.Tools
	sink    errSink
	release []func()

	calls  atomic.Int64 // no-op tool runs
	want   atomic.Int64 // tool calls the turns asked for
	agents []string     // every agent that ran a turn
	mu     sync.Mutex   // guards agents
	seq    atomic.Int64 // names fresh agents and makes prompts unique

	// tp and content trace the agents built from now on (nil: off).
	tp      trace.TracerProvider
	content bool
}

func openToolRig(ctx context.Context, env *Env) (g *toolRig, err error) {
	return openToolRigWith(ctx, env, nil)
}

// openToolRigWith is openToolRig on a Log whose config tweak changed (an
// Owner, to fence it as agentd does); nil: the Env's config.
func openToolRigWith(ctx context.Context, env *Env, tweak func(*eventlog.Config)) (g *toolRig, err error) {
	g = &toolRig{env: env}
	defer func() {
		if err != nil {
			g.close()
		}
	}()
	cfg, err := env.LogConfig()
	if err != nil {
		return nil, err
	}
	if tweak != nil {
		tweak(&cfg)
	}
	lg, err := eventlog.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	g.lg, g.release = lg, append(g.release, func() { lg.Close(); env.DropLog(cfg) })
	g.writes = &writeCounter{Log: lg}
	// As agentd wires them (agentd.Deps.Views): the runs table and the
	// chat views on one Follower of the events stream, one consumer that
	// decodes each event once and applies it to every view in one Pebble
	// batch; the chunks stream's projection on a Projector of its own.
	views, err := lg.NewFollower()
	if err != nil {
		return nil, err
	}
	if g.table, err = fiber.AddTable(lg, views); err != nil {
		return nil, err
	}
	store, streams, err := chat.AddStore(lg, views)
	if err != nil {
		return nil, err
	}
	g.store = store
	if g.prs, err = runProjectors(ctx, []projector{views, streams}); err != nil {
		return nil, err
	}
	g.release = append(g.release, func() { g.prs.stop() })
	b, stop := startBatcher(lg)
	g.batcher, g.release = b, append(g.release, stop)
	noop, err := chat.NewTool("noop", "does nothing", func(context.Context, struct{}) (struct{}, error) {
		g.calls.Add(1)
		return struct{}{}, nil
	}, chat.WithSafety(chat.Idempotent))
	if err != nil {
		return nil, err
	}
	if g.tools, err = chat.NewTools(noop); err != nil {
		return nil, err
	}
	return g, nil
}

// close stops and releases everything, last opened first.
func (g *toolRig) close() {
	for i := len(g.release) - 1; i >= 0; i-- {
		g.release[i]()
	}
	g.release = nil
}

// runner returns a fiber Runner of agent on the rig's log.
func (g *toolRig) runner(agent string) (*fiber.Runner, error) {
	return fiber.New(fiber.Config{Log: g.writes, Table: g.table, Agent: agent, Logger: g.env.Logger,
		Hooks: fiber.Hooks{OnError: g.sink.add}, TracerProvider: g.tp})
}

// toolHost is one agent: its fiber Runner and chat Agent, wired as agentd
// wires them, and the model it calls.
type toolHost struct {
	r *fiber.Runner
	a *chat.Agent
	p *stepTimer
}

// packChunks is the bench's chat.Config.ChunkBatchesWritable: on, as agentd with --pack-chunks in a
// cluster whose record format reached agentd.FormatChunkBatches.
func packChunks() bool { return true }

// endRecords is the bench's chat.Config.EndRecordsWritable: on, as agentd
// in a cluster whose record format reached agentd.FormatEndRecords.
func endRecords() bool { return true }

// announcedSteps is the bench's chat.Config.AnnouncedStepsWritable: on, as
// agentd once every node reads record format 9 (FormatAnnouncedSteps).
func announcedSteps() bool { return true }

// inlineEnds is the bench's chat.Config.InlineEndsWritable: on, as agentd
// once every node reads record format 11 (FormatInlineEnds).
func inlineEnds() bool { return true }

func (g *toolRig) host(agent string, p *stepTimer) (*toolHost, error) {
	r, err := g.runner(agent)
	if err != nil {
		return nil, err
	}
	a, err := chat.New(chat.Config{Agent: agent, Log: g.writes, Store: g.store, Batcher: g.batcher,
		MaxPayload: g.lg.MaxPayload(), Fibers: r, Provider: p, Tools: g.tools, Logger: g.env.Logger,
		TracerProvider: g.tp, TraceContent: g.content,
		// As agentd at record format 8 (FormatEndRecords): the chunks
		// written together are one record, a turn's answer and usage
		// ride in its turn.completed.
		ChunkBatchesWritable: packChunks, EndRecordsWritable: endRecords, AnnouncedStepsWritable: announcedSteps,
		InlineEndsWritable: inlineEnds})
	if err != nil {
		r.Close()
		return nil, err
	}
	g.mu.Lock()
	g.agents = append(g.agents, agent)
	g.mu.Unlock()
	return &toolHost{r: r, a: a, p: p}, nil
}

func (h *toolHost) close() { h.r.Close() }

// prompt returns a user message the local model answers after k calls of
// the no-op tool, one per step, or at once for k 0. Each is unique.
func (g *toolRig) prompt(k int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "bench turn %d", g.seq.Add(1))
	for range k {
		b.WriteString("\n/tool noop {}")
	}
	return b.String()
}

// turn sends a prompt of k tool calls to h and waits until the turn's
// fiber has ended.
func (g *toolRig) turn(ctx context.Context, h *toolHost, k int) error {
	g.want.Add(int64(k))
	h.p.newTurn()
	if _, err := h.a.Send(ctx, chat.SendRequest{Text: g.prompt(k)}); err != nil {
		return err
	}
	h.r.Wait()
	return nil
}

// freshTurn runs one turn of k tool calls on a new agent whose model is p,
// adding its time (from Send to the end of its fiber) to s; making and
// closing the agent are not timed.
func (g *toolRig) freshTurn(ctx context.Context, s *series, p *stepTimer, k int) error {
	h, err := g.host("tc"+strconv.FormatInt(g.seq.Add(1), 10), p)
	if err != nil {
		return err
	}
	defer h.close()
	start := time.Now()
	err = g.turn(ctx, h, k)
	d := time.Since(start)
	s.elapsed += d
	s.ops++
	s.lat = append(s.lat, d)
	return err
}

// check returns an error unless every turn completed with the answer and
// every tool call ran once, and nothing was reported to OnError.
func (g *toolRig) check(ctx context.Context) error {
	if err := g.sink.err(); err != nil {
		return err
	}
	if got, want := g.calls.Load(), g.want.Load(); got != want {
		return fmt.Errorf("the no-op tool ran %d times, want %d", got, want)
	}
	last, err := g.lg.LastSeq(ctx, eventlog.Filter{})
	if err != nil {
		return err
	}
	if err := g.store.WaitFor(ctx, last); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, agent := range g.agents {
		tr, ok, err := g.store.LastTurn(agent)
		switch {
		case err != nil:
			return err
		case !ok:
			continue // an agent that only ran bare fibers
		case tr.Status != chat.TurnCompleted || tr.FinishReason != llm.FinishStop:
			return fmt.Errorf("agent %s: last turn %s %q %q", agent, tr.Status, tr.FinishReason, tr.Error)
		}
	}
	return nil
}

// stepTimer is the local model (Rate -1) as an agent's provider, timing
// the gaps between its calls within a turn: from the end of one model call
// (the chat layer stops reading it) to the start of the next. With record
// set it keeps the requests it was sent. One turn at a time.
type stepTimer struct {
	local  *llm.Local
	record bool

	mu      sync.Mutex
	lastEnd time.Time // zero before a turn's first call
	gaps    []time.Duration
	reqs    []llm.Request
}

var _ llm.Provider = (*stepTimer)(nil)

func newStepTimer() *stepTimer { return &stepTimer{local: llm.NewLocal(llm.LocalConfig{Rate: -1})} }

// Name returns "local".
func (p *stepTimer) Name() string { return "local" }

// ResumesByID reports what the local model does (false).
func (p *stepTimer) ResumesByID() bool { return p.local.ResumesByID() }

// newTurn forgets the last call, so that the next is a turn's first.
func (p *stepTimer) newTurn() {
	p.mu.Lock()
	p.lastEnd = time.Time{}
	p.mu.Unlock()
}

// Stream streams the local model's answer to req.
func (p *stepTimer) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Delta, error] {
	start := time.Now()
	p.mu.Lock()
	if !p.lastEnd.IsZero() {
		p.gaps = append(p.gaps, start.Sub(p.lastEnd))
	}
	if p.record {
		p.reqs = append(p.reqs, req)
	}
	p.mu.Unlock()
	return func(yield func(llm.Delta, error) bool) {
		defer func() {
			end := time.Now()
			p.mu.Lock()
			p.lastEnd = end
			p.mu.Unlock()
		}()
		for d, err := range p.local.Stream(ctx, req) {
			if !yield(d, err) || err != nil {
				return
			}
		}
	}
}

// projector is what runProjectors runs: an eventlog.Projector or Follower.
type projector interface {
	Run(ctx context.Context) error
	Ready() <-chan struct{}
}

// projectors runs a set of projectors in goroutines it owns.
type projectors struct {
	cancel context.CancelFunc
	done   chan error
	n      int
}

// runProjectors starts every projector of prs and waits until all are
// ready.
func runProjectors(ctx context.Context, prs []projector) (*projectors, error) {
	rctx, cancel := context.WithCancel(ctx)
	p := &projectors{cancel: cancel, done: make(chan error, len(prs)), n: len(prs)}
	for _, pr := range prs {
		go func() { p.done <- pr.Run(rctx) }()
	}
	for _, pr := range prs {
		select {
		case <-pr.Ready():
		case err := <-p.done:
			p.n--
			return nil, errors.Join(errors.New("a projector stopped before ready"), err, p.stop())
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), p.stop())
		}
	}
	return p, nil
}

// stop stops every projector and waits for them, returning their errors.
func (p *projectors) stop() error {
	p.cancel()
	var errs []error
	for range p.n {
		errs = append(errs, <-p.done)
	}
	p.n = 0
	return errors.Join(errs...)
}
