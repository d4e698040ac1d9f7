package main

import (
	"context"
	"runtime/metrics"
	"time"
)

// Scenario is one benchmark: Run measures on env and returns rows, each a
// figure next to its baseline measured in the same call.
type Scenario struct {
	// Name is what -run matches, such as "append-single".
	Name string
	// Run measures. It must release everything it opened before returning.
	Run func(ctx context.Context, env *Env) (Result, error)
	// Once marks a scenario that runs on servers of its own and does not
	// depend on -sync (it compares the sync modes itself, or runs agentd as
	// the chart does, with sync always): it runs under the first selected
	// mode only, and its rows' Sync is "both".
	Once bool
	// Requires names the flag a scenario cannot run without, such as
	// "-temporal": without it, the scenario logs that it is skipped and
	// returns no rows.
	Requires string
}

// Result is what a scenario measured.
type Result struct {
	Rows []Row
}

// Row is one figure compared with one baseline. Scenario and Sync are filled
// in by the harness.
type Row struct {
	Scenario string `json:"scenario"`
	Sync     string `json:"sync"`
	// Figure names what was measured, with its unit: "msgs/s 64B", "p50 us 1KiB".
	Figure string  `json:"figure"`
	Value  float64 `json:"value"`
	// Baseline names what Value is compared with, such as "raw PublishMsg".
	Baseline      string  `json:"baseline"`
	BaselineValue float64 `json:"baselineValue"`
	// LowerIsBetter marks latencies: the ratio is then baseline/value.
	LowerIsBetter bool `json:"lowerIsBetter,omitempty"`
	// Target is the minimum ratio wanted; 0 means none.
	Target float64 `json:"target,omitempty"`
	// TargetNote says what the target means, such as "within 1.3x".
	TargetNote string `json:"targetNote,omitempty"`
}

// Ratio returns the figure relative to its baseline, oriented so that above 1
// means ours is better. It is 0 when either value is 0.
func (r Row) Ratio() float64 {
	if r.Value == 0 || r.BaselineValue == 0 {
		return 0
	}
	if r.LowerIsBetter {
		return r.BaselineValue / r.Value
	}
	return r.Value / r.BaselineValue
}

// Pass reports whether the row meets its target; ok is false without one.
func (r Row) Pass() (pass, ok bool) {
	if r.Target == 0 {
		return false, false
	}
	return r.Ratio() >= r.Target, true
}

// scenarios lists every scenario in the order they run. Later issues append
// theirs here.
func scenarios() []Scenario {
	return []Scenario{
		{Name: "append-single", Run: appendSingle},
		{Name: "append-async", Run: appendAsync},
		{Name: "append-batch", Run: appendBatch},
		{Name: "append-fenced", Run: appendFenced},
		{Name: "projection-catchup", Run: projectionCatchup},
		{Name: "views-rebuild", Run: viewsRebuild},
		{Name: "views-rebuild-chunks", Run: viewsRebuildChunks},
		{Name: "fiber-run", Run: fiberRun},
		{Name: "fiber-stash", Run: fiberStash},
		{Name: "fiber-step", Run: fiberStep},
		{Name: "fiber-recovery", Run: fiberRecovery},
		{Name: "chat-chunks", Run: chatChunks},
		{Name: "chat-send", Run: chatSend},
		{Name: "chat-post", Run: chatPost},
		{Name: "replay", Run: replayScenario},
		{Name: "tool-call", Run: toolCall},
		{Name: "tool-turn", Run: toolTurn},
		{Name: "tool-agents", Run: toolAgents},
		{Name: "subagent-call", Run: subagentCall},
		{Name: "subagent-fanout", Run: subagentFanout},
		{Name: "tracing", Run: tracingCost},
		{Name: "group-commit", Run: groupCommit},
		{Name: "restart-ready", Run: restartReady},
		{Name: "restart-load", Run: restartLoad},
		{Name: "compaction", Run: compactionScenario},
		{Name: "agents-list", Run: agentsList},
		{Name: "sync-cost", Run: syncCost, Once: true},
		{Name: "temporal", Run: temporalScenario, Once: true, Requires: "-temporal"},
		{Name: "failover", Run: failover, Once: true},
		{Name: "restart-share", Run: restartShare, Once: true},
		{Name: "handoff", Run: handoff, Once: true},
		{Name: "follow-stepdown", Run: followStepdown, Requires: "-nodes 3"},
		{Name: "auth-cost", Run: authCost, Once: true},
		{Name: "scale", Run: scaleScenario, Once: true},
		{Name: "conversation-growth", Run: conversationGrowth, Once: true},
		{Name: "fork", Run: forkScenario, Once: true},
		{Name: "scale-out", Run: scaleOut, Once: true},
	}
}

// roundsOf returns how many alternating rounds a count of n is split into
// so that each round does about chunk operations per series: small rounds
// interleave baseline and subject finely. At least 2, so that each series
// runs first once.
func roundsOf(n, chunk int) int { return max(2, n/chunk) }

// alternate runs each of fns once per round, forwards in even rounds and
// backwards in odd ones (B S, S B, B S ...), so that drift in the machine's
// speed hits every series alike. Each call gets the round number.
func alternate(rounds int, fns ...func(round int) error) error {
	for i := range rounds {
		for j := range fns {
			f := fns[j]
			if i%2 == 1 {
				f = fns[len(fns)-1-j]
			}
			if err := f(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// split divides n into parts as equal as possible; part i's size.
func split(n, parts, i int) int {
	q, r := n/parts, n%parts
	if i < r {
		return q + 1
	}
	return q
}

// series accumulates one measured series across rounds: operations, time
// spent, and per-operation latencies when recorded.
type series struct {
	ops     int
	elapsed time.Duration
	lat     []time.Duration
	// cpu is the process's CPU time during timed (processCPU): every
	// goroutine's, the embedded servers' included.
	cpu time.Duration
	// alloc is the heap the process allocated during timed (heapAllocs),
	// the embedded servers' included: what paces the garbage collector.
	alloc uint64
}

// allocPerOp returns the heap bytes the process allocated per operation
// of timed; 0 when not measured.
func (s *series) allocPerOp() float64 {
	if s.ops == 0 {
		return 0
	}
	return float64(s.alloc) / float64(s.ops)
}

// heapAllocs returns the bytes the process allocated on the heap so far
// (runtime/metrics' /gc/heap/allocs:bytes).
func heapAllocs() uint64 {
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return sample[0].Value.Uint64()
}

// cpuPerOp returns the process's CPU time per operation of timed, in
// microseconds; 0 when not measured.
func (s *series) cpuPerOp() float64 {
	if s.ops == 0 {
		return 0
	}
	return float64(s.cpu.Microseconds()) / float64(s.ops)
}

// rate returns operations per second over the time spent.
func (s *series) rate() float64 {
	if s.elapsed <= 0 {
		return 0
	}
	return float64(s.ops) / s.elapsed.Seconds()
}

// timed runs f, adding ops and the time it took to s.
func (s *series) timed(ops int, f func() error) error {
	start, cpu, alloc := time.Now(), processCPU(), heapAllocs()
	err := f()
	s.elapsed += time.Since(start)
	s.cpu += processCPU() - cpu
	s.alloc += heapAllocs() - alloc
	s.ops += ops
	return err
}

// sequential runs op n times one after the other, adding each call's latency
// and the total time to s.
func (s *series) sequential(n int, op func() error) error {
	start := time.Now()
	for range n {
		t := time.Now()
		if err := op(); err != nil {
			s.elapsed += time.Since(start)
			return err
		}
		s.lat = append(s.lat, time.Since(t))
	}
	s.elapsed += time.Since(start)
	s.ops += n
	return nil
}
