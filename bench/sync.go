package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd/demo"
	"github.com/forever-agents/forever/eventlog"
)

// Sync-cost scenario parameters.
const (
	syncTurns      = 100 // chat turns per series at -n 1
	syncSteps      = 500 // steps per series at -n 1
	syncFiberSteps = 20  // steps of each steps fiber
	syncChunk      = 5   // chat turns per series per round
	syncWait       = time.Minute
)

// syncCost measures what the crash-safe configuration costs through the
// real agentd binary: two agentd processes run side by side on their own
// data dirs, one with --sync always (the default: every JetStream write
// fsynced before it is acknowledged), the baseline with --sync interval,
// both on the local model at unlimited speed (--local-rate -1). Rounds
// alternate between them:
//
//   - a chat turn: the "chat" command to one chat agent over NATS, timed
//     until its turn's fiber.completed reaches a subscriber of the agent's
//     events (the turn's last event), one turn after another;
//   - a steps fiber step: a "start" of syncFiberSteps steps with no delay
//     on a steps agent, timed as the gaps between the times of consecutive
//     op.completed events (set by agentd as it appends each, so the
//     subscriber's delivery does not blur them): each gap is one step's
//     steps.executed and op.completed, which carries the step's stash
//     (fiber.ThenStash) and the next step's op.started (fiber.ThenStep);
//     the start to the first step running, from sending "start" until the
//     time of the first steps.executed (the step's effect, which starts
//     once fiber.started, carrying the first snapshot and the step's
//     op.started, is stored: one synced write); and the start to the first
//     step done, until the first op.completed arrives (three synced
//     writes, as the step's effect is itself a write).
//
// The ratio is the interval figure over the always figure: the share of
// the crash-safe speed. The scenario runs once per bench run, whatever
// -sync says, and ignores the Env's server.
func syncCost(ctx context.Context, env *Env) (res Result, err error) {
	bin, err := env.AgentdBinary(ctx)
	if err != nil {
		return Result{}, err
	}
	var always, interval *syncTarget
	for _, t := range []struct {
		mode SyncMode
		into **syncTarget
	}{{SyncAlways, &always}, {SyncInterval, &interval}} {
		st, err := openSyncTarget(ctx, env, bin, t.mode)
		if err != nil {
			return Result{}, err
		}
		defer func() { err = errors.Join(err, st.close()) }()
		*t.into = st
	}
	for _, st := range []*syncTarget{always, interval} {
		if err := st.warmUp(ctx); err != nil {
			return Result{}, fmt.Errorf("warm up %s: %w", st.mode, err)
		}
	}
	turns := max(2, env.Count(syncTurns, syncTurns))
	rounds := roundsOf(turns, syncChunk)
	chat := func(st *syncTarget) func(int) error {
		return func(r int) error {
			for range split(turns, rounds, r) {
				d, err := st.turn(ctx)
				if err != nil {
					return err
				}
				st.turns = append(st.turns, d)
			}
			return nil
		}
	}
	if err := alternate(rounds, chat(always), chat(interval)); err != nil {
		return Result{}, err
	}
	fibers := max(2, env.Count(syncSteps, syncSteps)/syncFiberSteps)
	steps := func(st *syncTarget) func(int) error {
		return func(int) error {
			t := time.Now()
			gaps, err := st.fiber(ctx, syncFiberSteps, demo.StepEffectEvent)
			st.steps = append(st.steps, gaps...)
			st.firsts = append(st.firsts, st.first.Sub(t))
			st.runs = append(st.runs, st.firstRun.Sub(t))
			return err
		}
	}
	if err := alternate(fibers, steps(always), steps(interval)); err != nil {
		return Result{}, err
	}
	const bl = "agentd --sync interval"
	row := func(what string, p float64, a, i []time.Duration) Row {
		return Row{
			Figure: fmt.Sprintf("%s p%.0f ms, agentd --sync always", what, p), Value: millis(percentile(a, p)),
			Baseline: fmt.Sprintf("%s, p%.0f ms", bl, p), BaselineValue: millis(percentile(i, p)), LowerIsBetter: true,
		}
	}
	return Result{Rows: []Row{
		row("chat turn", 50, always.turns, interval.turns),
		row("chat turn", 99, always.turns, interval.turns),
		row("steps fiber step", 50, always.steps, interval.steps),
		row("steps fiber step", 99, always.steps, interval.steps),
		row("steps start to first step running", 50, always.runs, interval.runs),
		row("steps start to first step running", 99, always.runs, interval.runs),
		row("steps start to first step done", 50, always.firsts, interval.firsts),
		row("steps start to first step done", 99, always.firsts, interval.firsts),
	}}, nil
}

// syncTarget is one running agentd of sync-cost, a connection to it, and
// subscriptions to the events of its chat and steps agents.
type syncTarget struct {
	mode  SyncMode
	dir   string
	p     *agentdProc
	nc    *nats.Conn
	chat  chan *nats.Msg // events of chat:bench
	stepC chan *nats.Msg // events of steps:bench
	seq   int

	turns, steps, firsts, runs []time.Duration
	first                      time.Time // arrival of the last fiber's first op.completed
	firstRun                   time.Time // time of the last fiber's first steps.executed
}

const (
	syncChatAgent  = "chat:bench"
	syncStepsAgent = "steps:bench"
)

func openSyncTarget(ctx context.Context, env *Env, bin string, mode SyncMode) (st *syncTarget, err error) {
	st = &syncTarget{mode: mode, chat: make(chan *nats.Msg, 4096), stepC: make(chan *nats.Msg, 4096)}
	defer func() {
		if err != nil {
			err = errors.Join(err, st.close())
		}
	}()
	if st.dir, err = env.TempDir(); err != nil {
		return nil, err
	}
	if st.p, err = newAgentdProc(bin, st.dir, mode, "--local-rate", "-1"); err != nil {
		return nil, err
	}
	if _, err := st.p.start(ctx); err != nil {
		return nil, err
	}
	if st.nc, err = st.p.connect(); err != nil {
		return nil, err
	}
	for agent, ch := range map[string]chan *nats.Msg{syncChatAgent: st.chat, syncStepsAgent: st.stepC} {
		if _, err := st.nc.ChanSubscribe(eventlog.DefaultPrefix+".evt."+agent, ch); err != nil {
			return nil, fmt.Errorf("bench: subscribe: %w", err)
		}
	}
	return st, st.nc.Flush()
}

func (st *syncTarget) close() error {
	if st.nc != nil {
		st.nc.Close()
	}
	var err error
	if st.p != nil {
		err = st.p.stop()
	}
	if st.dir != "" {
		os.RemoveAll(st.dir)
	}
	return err
}

// warmUp activates both agents: two chat turns and one short fiber.
func (st *syncTarget) warmUp(ctx context.Context) error {
	for range 2 {
		if _, err := st.turn(ctx); err != nil {
			return err
		}
	}
	_, err := st.fiber(ctx, 3, demo.StepEffectEvent)
	return err
}

// command sends verb with data to agent and returns the reply, or the
// service error it answered with.
func (st *syncTarget) command(ctx context.Context, agent, verb string, data any) (json.RawMessage, error) {
	b, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, syncWait)
	defer cancel()
	msg, err := st.nc.RequestWithContext(rctx, fmt.Sprintf("forever.cmd.%s.%s", agent, verb), b)
	if err != nil {
		return nil, fmt.Errorf("bench: %s %s: %w", agent, verb, err)
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
		return nil, fmt.Errorf("bench: %s %s: error %s: %s", agent, verb, code, msg.Data)
	}
	return msg.Data, nil
}

// turn runs one chat turn and returns the time from sending it until its
// fiber's end arrived (its fiber.completed, or the turn.completed that
// carries it).
func (st *syncTarget) turn(ctx context.Context) (time.Duration, error) {
	st.seq++
	start := time.Now()
	if _, err := st.command(ctx, syncChatAgent, "chat", map[string]string{"text": fmt.Sprintf("bench turn %d", st.seq)}); err != nil {
		return 0, err
	}
	err := st.await(ctx, st.chat, func(m *nats.Msg) bool {
		if m.Header.Get(eventlog.HeaderType) == "fiber.completed" {
			return true
		}
		// From record format 11 the turn's outcome carries its fiber's end.
		var e eventlog.Event
		return m.Header.Get(eventlog.HeaderType) == "turn.completed" && json.Unmarshal(m.Data, &e) == nil && e.Completes != ""
	})
	return time.Since(start), err
}

// fiber runs a steps fiber of k steps and returns the gaps between its
// consecutive op.completed events: one per step.
func (st *syncTarget) fiber(ctx context.Context, k int, effect string) ([]time.Duration, error) {
	start := demo.StepsStart{Steps: k, DelayMS: 0, Effect: effect}
	if _, err := st.command(ctx, syncStepsAgent, "start", start); err != nil {
		return nil, err
	}
	var gaps []time.Duration
	var last time.Time
	var bad error
	ran := false
	err := st.await(ctx, st.stepC, func(m *nats.Msg) bool {
		typ := m.Header.Get(eventlog.HeaderType)
		if typ == demo.EventStepExecuted && !ran {
			var e eventlog.Event
			if err := json.Unmarshal(m.Data, &e); err != nil || e.Time.IsZero() {
				bad = fmt.Errorf("bench: undecodable %s event: %v: %s", typ, err, m.Data)
				return true
			}
			ran, st.firstRun = true, e.Time
		}
		if typ == "op.completed" {
			if last.IsZero() {
				st.first = time.Now()
			}
			var e eventlog.Event
			if err := json.Unmarshal(m.Data, &e); err != nil || e.Time.IsZero() {
				bad = fmt.Errorf("bench: undecodable op.completed event: %v: %s", err, m.Data)
				return true
			}
			if !last.IsZero() {
				gaps = append(gaps, e.Time.Sub(last))
			}
			last = e.Time
		}
		return typ == "fiber.completed"
	})
	if err == nil {
		err = bad
	}
	if err == nil && len(gaps) != k-1 {
		err = fmt.Errorf("bench: a fiber of %d steps completed %d ops after its first", k, len(gaps))
	}
	return gaps, err
}

// await reads events from ch until done returns true for one.
func (st *syncTarget) await(ctx context.Context, ch <-chan *nats.Msg, done func(*nats.Msg) bool) error {
	timeout := time.NewTimer(syncWait)
	defer timeout.Stop()
	for {
		select {
		case m := <-ch:
			if done(m) {
				return nil
			}
		case <-timeout.C:
			return fmt.Errorf("bench: agentd --sync %s: no end of the turn or fiber after %s\n%s", st.mode, syncWait, st.p.tail())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
