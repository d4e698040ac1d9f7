package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/forever-agents/forever/internal/stalls"
)

// The handoff scenario: what a partition's move between live nodes costs
// its agents (issue 36). Three agentd nodes as the chart starts them,
// failoverLoadAgents steps agents writing an event every
// failoverLoadDelayMS; then, node by node, an orderly stop (SIGTERM: the
// node hands its partitions to the others) and a start of the same
// node (the others hand its partitions back, warm: ownership/warm.go).
// A stop drains (ownership/drain.go): each partition goes once the node
// taking it announces it warm, for up to DrainWait.
// Each agent's events name their writer, so a move is the gap between an
// agent's last event written by one node and its next written by another.
const (
	handoffRounds = 6 // stops and starts, over the nodes in turn, at -n 1
)

// handoffPhase is what one stop or start did to the load's agents.
type handoffPhase struct {
	moves  []time.Duration // each move's gap
	steady []time.Duration // every other gap between two events
	worst  time.Duration   // the longest gap of any agent
	// slowest is the longest move, worstGap the longest gap: their
	// agents, and the events around them.
	slowest, worstGap           stalls.Gap
	slowestAgent, worstGapAgent string
}

// handoff runs the scenario.
func handoff(ctx context.Context, env *Env) (_ Result, err error) {
	cc, err := startChartCluster(ctx, env)
	if err != nil {
		return Result{}, err
	}
	defer cc.close(env, &err)
	c, nc, ttl := cc.agentdCluster, cc.nc, cc.ttl
	load, err := startStallLoad(ctx, nc, failoverLoadAgents)
	if err != nil {
		return Result{}, err
	}
	if err := sleepCtx(ctx, failoverObserve); err != nil {
		return Result{}, err
	}
	var stops, starts []handoffPhase
	for i := range env.Count(handoffRounds, handoffRounds) {
		nd := c.nodes[i%len(c.nodes)]
		at := time.Now()
		if err := nd.stop(); err != nil {
			return Result{}, fmt.Errorf("round %d: %w", i+1, err)
		}
		if err := load.waitResumed(ctx, at, at.Add(failoverElection+ttl)); err != nil {
			return Result{}, err
		}
		ph, err := load.phase(ctx, at, time.Now().Add(-time.Second))
		if err != nil {
			return Result{}, fmt.Errorf("round %d: %w", i+1, err)
		}
		stops = append(stops, ph)
		env.Logger.Info("handoff", "round", i+1, "stopped", nd.name, "moves", len(ph.moves),
			"longest move", slices.Max(append(ph.moves, 0)).Round(time.Millisecond), "worst gap", ph.worst.Round(time.Millisecond),
			"slowest move", ph.slowestAgent, "at", ph.slowest.Before.At.Format("15:04:05.000"),
			"from", ph.slowest.Before.Node, "to", ph.slowest.After.Node,
			"worst gap's agent", ph.worstGapAgent, "at", ph.worstGap.Before.At.Format("15:04:05.000"),
			"written by", ph.worstGap.Before.Node, "then", ph.worstGap.After.Node,
			"drain", lastLine(nd.logPath, "handed off warm before stopping"))

		at = time.Now()
		if err := c.startNode(nd); err != nil {
			return Result{}, err
		}
		if err := c.waitHealthy(ctx, failoverHealthy); err != nil {
			return Result{}, err
		}
		if err := sleepCtx(ctx, failoverObserve+time.Second); err != nil {
			return Result{}, err
		}
		ph, err = load.phase(ctx, at, time.Now().Add(-time.Second))
		if err != nil {
			return Result{}, fmt.Errorf("round %d: %w", i+1, err)
		}
		starts = append(starts, ph)
		env.Logger.Info("handoff", "round", i+1, "started", nd.name, "moves", len(ph.moves),
			"longest move", slices.Max(append(ph.moves, 0)).Round(time.Millisecond), "worst gap", ph.worst.Round(time.Millisecond))
	}
	return Result{Rows: append(handoffRows("an orderly stop (SIGTERM)", stops),
		handoffRows("a start, warm", starts)...)}, nil
}

// lastLine returns the last line of the file at path that contains
// what, "" when none does.
func lastLine(path, what string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	out := ""
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, what) {
			out = strings.TrimSpace(line)
		}
	}
	return out
}

// phase reads the load's events from a little before at until end and
// measures them (measureHandoff).
func (m *stallMonitor) phase(ctx context.Context, at, end time.Time) (handoffPhase, error) {
	stamps, err := m.stored(ctx, at.Add(-failoverActive), end)
	if err != nil {
		return handoffPhase{}, err
	}
	return measureHandoff(stamps, at, end), nil
}

// measureHandoff sorts out each agent's gaps between events that end
// after at and start before end: a move when the two events' writers
// differ, steady otherwise.
func measureHandoff(stamps map[string][]stalls.Stamp, at, end time.Time) handoffPhase {
	var ph handoffPhase
	for agent, ss := range stamps {
		slices.SortFunc(ss, func(x, y stalls.Stamp) int { return x.At.Compare(y.At) })
		for i := 1; i < len(ss); i++ {
			a, b := ss[i-1], ss[i]
			if b.At.Before(at) || a.At.After(end) {
				continue
			}
			gap := b.At.Sub(a.At)
			if gap > ph.worst {
				ph.worst, ph.worstGap, ph.worstGapAgent = gap, stalls.Gap{Before: a, After: b}, agent
			}
			if a.Node != "" && b.Node != "" && a.Node != b.Node {
				ph.moves = append(ph.moves, gap)
				if gap > ph.slowest.After.At.Sub(ph.slowest.Before.At) {
					ph.slowest, ph.slowestAgent = stalls.Gap{Before: a, After: b}, agent
				}
			} else {
				ph.steady = append(ph.steady, gap)
			}
		}
	}
	return ph
}

// handoffRows are a kind of phase's rows over every round: its moves'
// gaps against the steady gaps of the same phases.
func handoffRows(what string, phases []handoffPhase) []Row {
	var moves, steady []time.Duration
	var worst time.Duration
	for _, ph := range phases {
		moves, steady = append(moves, ph.moves...), append(steady, ph.steady...)
		worst = max(worst, ph.worst)
	}
	if len(moves) == 0 {
		moves = []time.Duration{0}
	}
	over := countOver(moves, failoverStall)
	base := millis(percentile(steady, 50))
	rows := []Row{
		{Figure: fmt.Sprintf("%s: an agent's gap across a move p50 ms, %d moves in %d rounds", what, len(moves), len(phases)),
			Value: millis(percentile(moves, 50)), Baseline: "steady gap p50 ms", BaselineValue: base, LowerIsBetter: true},
		{Figure: fmt.Sprintf("%s: an agent's gap across a move p99 ms", what),
			Value: millis(percentile(moves, 99)), Baseline: "steady gap p50 ms", BaselineValue: base, LowerIsBetter: true},
		{Figure: fmt.Sprintf("%s: longest gap across a move ms; moves over 1 s %s", what, frac(over, len(moves))),
			Value: max(1, millis(slices.Max(moves))), Baseline: "goal, ms", BaselineValue: millis(failoverStall), LowerIsBetter: true,
			Target: 1, TargetNote: "a move stalls no agent > 1 s"},
		{Figure: fmt.Sprintf("%s: any agent's longest gap ms", what),
			Value: max(1, millis(worst)), Baseline: "steady gap p50 ms", BaselineValue: base, LowerIsBetter: true},
	}
	return rows
}
