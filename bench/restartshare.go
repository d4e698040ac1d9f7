package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/chartargs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"golang.org/x/sync/errgroup"
)

// Restart-share scenario parameters.
const (
	// restartShareEvents is the cluster's whole history at -n 1, the same
	// on 3 and on 6 nodes.
	restartShareEvents = 210_000
	// restartShareRounds is the timed restarts of each kind per cluster.
	restartShareRounds = 2
	// restartShareGoal: at 6 nodes, the restarted node's figure within
	// 0.5x of its figure at 3 nodes.
	restartShareGoal = 0.5
	// restartShareNode is the node restarted, by index.
	restartShareNode = 1
	// restartShareStable is how long the node's views must stay caught up
	// (nothing more applied) for its restart to count as done.
	restartShareStable = time.Second
	// restartShareAgents is the agents the history is spread over: 20 a
	// partition on average, so a node's share of the history follows its
	// share of the partitions. With 100 (restartAgents) a partition held
	// 0 to 5 agents, and as partitions stay with their holders (record
	// format 10) a node's 9 partitions held 23,100 to 39,900 of the
	// 210,000 events from one run to the next.
	restartShareAgents = 1280
)

// restartShareFlags are the flags restart-share adds to the chart's
// without -agentd-flags: a node's views then hold its own partitions.
var restartShareFlags = []string{"--shards", "8", "--owned-views"}

// restartShare measures what one node's restart and rebuild cost against
// the cluster's size, with the same total history: a sharded cluster with
// owned views (restartShareFlags, or -agentd-flags) of 3 and then of 6
// agentd started as the chart starts its pods, each in a CPU cgroup of
// its own as scale-out's (restartShareQuota), its log filled with
// restartShareEvents events (whole chat turns over restartShareAgents agents,
// through a Bind Log), after timing forever-1's restart before any
// history (its fixed cost); then, once the fill is older than JetStream's
// duplicate window (waitOutDuplicates: a restart within it reloads the
// window's message ids, nats-server's rebuildDedupe, which was 41-54% of
// its samples), alternating, forever-1 is
//
//   - restarted: SIGTERM (it hands its partitions off), start, and
//   - rebuilt: SIGTERM, its Pebble dir removed, start,
//
// each timed from the start until it answers /readyz 200, holds its share
// of the partitions (as waitHealthy counts it), each of them recovered
// (forever_agentd_partitions_recovered equal to the partitions it owns:
// their views caught up) and its views have nothing left to apply (the
// "runs" projection's applied count unchanged for restartShareStable,
// which is not counted). Each figure comes with the
// node's CPU over that time and the events its views applied. The rows
// compare the 6-node figure with the 3-node one: goal within 0.5x, as the
// node's partitions are half as many; beyondFixed's rows compare the part
// of each beyond the restart before the history. Each cluster's load average is in
// the figure: other processes on the machine move the times, less the CPU
// and not the events.
func restartShare(ctx context.Context, env *Env) (Result, error) {
	bin, err := env.AgentdBinary(ctx)
	if err != nil {
		return Result{}, err
	}
	flags := env.cfg.AgentdFlags
	if len(flags) == 0 {
		flags = restartShareFlags
	}
	events := max(7, env.Count(restartShareEvents, restartShareEvents)/7*7)
	rounds := max(1, min(restartShareRounds, env.Count(restartShareRounds, restartShareRounds)))
	quota, quotaNote := restartShareQuota(env)
	var runs [2]restartShareRun
	for i, n := range []int{3, 6} {
		if runs[i], err = restartShareCluster(ctx, env, bin, n, flags, events, rounds, quota); err != nil {
			return Result{}, fmt.Errorf("%d nodes: %w", n, err)
		}
		env.Logger.Info("restart-share", "nodes", n, "restart", runs[i].restart, "rebuild", runs[i].rebuild, "load", runs[i].load)
	}
	r3, r6 := runs[0], runs[1]
	rows := []Row{{
		Figure: fmt.Sprintf("forever-%d restart before the history was written (its fixed cost) p50 ms, 6 nodes, %s", restartShareNode, quotaNote),
		Value:  millis(percentile(r6.empty.took, 50)), Baseline: "3 nodes, ms", BaselineValue: millis(percentile(r3.empty.took, 50)), LowerIsBetter: true,
	}}
	for _, k := range []struct {
		name   string
		m3, m6 restartShareFigures
	}{{"restart", r3.restart, r6.restart}, {"rebuild from an empty Pebble", r3.rebuild, r6.rebuild}} {
		base := fmt.Sprintf("3 nodes (%d partitions, load %s)", r3.share, r3.load)
		note := "6 nodes within 0.5x of 3"
		rows = append(rows, Row{
			Figure: fmt.Sprintf("forever-%d %s to ready, its share and views caught up p50 ms, 6 nodes (%d partitions, load %s), %s events", restartShareNode, k.name, r6.share, r6.load, sizeLabel(events)),
			Value:  millis(percentile(k.m6.took, 50)), Baseline: base + ", ms", BaselineValue: millis(percentile(k.m3.took, 50)), LowerIsBetter: true,
			Target: 1 / restartShareGoal, TargetNote: note,
		}, Row{
			Figure: fmt.Sprintf("forever-%d %s: its CPU p50 ms, 6 nodes", restartShareNode, k.name),
			Value:  median(k.m6.cpu), Baseline: base + ", ms", BaselineValue: median(k.m3.cpu), LowerIsBetter: true,
			Target: 1 / restartShareGoal, TargetNote: note,
		})
		if applied := (Row{
			Figure: fmt.Sprintf("forever-%d %s: events its views applied p50, 6 nodes", restartShareNode, k.name),
			Value:  median(k.m6.applied), Baseline: base, BaselineValue: median(k.m3.applied), LowerIsBetter: true,
			Target: 1 / restartShareGoal, TargetNote: note,
		}); applied.BaselineValue > 0 {
			// A restart on its own Pebble applies nothing, the cluster
			// being idle: the row is the rebuild's.
			rows = append(rows, applied)
		}
		p50 := func(f restartShareFigures) float64 { return millis(percentile(f.took, 50)) }
		rows = append(rows, beyondFixed(k.name, "time", p50(k.m3), p50(r3.empty), p50(k.m6), p50(r6.empty)),
			beyondFixed(k.name, "CPU", median(k.m3.cpu), median(r3.empty.cpu), median(k.m6.cpu), median(r6.empty.cpu)))
	}
	return Result{Rows: rows}, nil
}

// restartShareQuota is the CPU each node is held to (0: none) and the
// words the rows say it in. With a quota each node's CPU is the same at 3
// and at 6 nodes, as the scale model holds it: unheld, a 2-core
// machine gave the 6 nodes 1.5-2x the load of the 3, and the restarted
// node's times carried it (docs/benchmarks.md, "The part of a restart
// beyond its fixed cost"). -cpu-quota below 0, or no cgroup v1 cpu
// controller to write, runs the nodes unheld, and the rows say so.
func restartShareQuota(env *Env) (float64, string) {
	quota := env.cfg.CPUQuota
	if quota < 0 {
		return 0, "no CPU quota (-cpu-quota below 0)"
	}
	if quota == 0 {
		quota = scaleOutQuota
	}
	if why := cpuCgroupsUnusable(); why != "" {
		env.Logger.Warn("restart-share: the nodes run without a CPU quota", "why", why)
		return 0, "no CPU quota (" + why + ")"
	}
	return quota, fmt.Sprintf("each node held to %.2f CPU", quota)
}

// restartShareRun is what restartShareCluster measured on one cluster.
type restartShareRun struct {
	share            int // the partitions the node holds when balanced
	restart, rebuild restartShareFigures
	// empty is the node's restarts before the history was written: what a
	// restart costs whatever the history (the process, nats-server's start,
	// the meta layer, the handover), measured on the same cluster.
	empty restartShareFigures
	load  string
}

// restartShareResolution is the least part beyond the fixed cost, in ms,
// that a beyondFixed row judges: two of waitCaughtUp's 100 ms polls. Below
// it at 3 nodes the part is the polls' noise, and the row has no verdict.
const restartShareResolution = 200

// beyondFixed is the row of what one kind of restart costs beyond the same
// node's restart before the history was written (what, in ms: the p50s the
// raw rows show, less the fixed cost's), at 6 nodes against 3: the part of
// it that depends on the history the node holds, which should follow its
// share of the partitions (goal within 0.5x, as the raw rows). The raw rows
// cannot show that while the fixed part, the same at both sizes, is most of
// a restart (docs/benchmarks.md, "Where a restart's CPU goes"). A part at
// or below zero at 6 nodes is shown as 1 ms: none of it depends on the
// history.
func beyondFixed(kind, what string, m3, empty3, m6, empty6 float64) Row {
	p3, p6 := m3-empty3, m6-empty6
	r := Row{
		Figure:        fmt.Sprintf("forever-%d %s: its %s beyond its restart before the history p50 ms, 6 nodes", restartShareNode, kind, what),
		Value:         max(p6, 1),
		Baseline:      "3 nodes, ms",
		BaselineValue: p3,
		LowerIsBetter: true,
	}
	if p3 < restartShareResolution {
		r.Baseline = fmt.Sprintf("3 nodes, ms (below %d ms: no verdict)", restartShareResolution)
		return r
	}
	r.Target, r.TargetNote = 1/restartShareGoal, "6 nodes within 0.5x of 3"
	return r
}

// restartShareFigures are one kind's rounds.
type restartShareFigures struct {
	took         []time.Duration
	cpu, applied []float64 // ms, events
}

// restartShareCluster starts an n-node cluster with flags, each node in a
// cgroup of quota CPUs (0: none), fills its log with events events, and
// times rounds restarts and rebuilds of one node.
func restartShareCluster(ctx context.Context, env *Env, bin string, n int, flags []string, events, rounds int, quota float64) (_ restartShareRun, err error) {
	dir, err := env.TempDir()
	if err != nil {
		return restartShareRun{}, err
	}
	defer os.RemoveAll(dir)
	defer func() {
		if err != nil {
			err = keepLogs(err, dir, env.cfg.Dir)
		}
	}()
	c := &agentdCluster{bin: bin, dir: dir, ttl: chartargs.DefaultLeaseTTL, extra: flags}
	if quota > 0 {
		cg := newCPUCgroups(quota)
		defer func() { err = errors.Join(err, cg.remove()) }()
		c.started = func(nd *clusterNode) error { return cg.add(nd.name, nd.cmd.Process.Pid) }
	}
	c, err = c.start(ctx, n, failoverHealthy)
	if err != nil {
		return restartShareRun{}, err
	}
	defer c.close()
	nc, err := nats.Connect(c.natsURLs(), nats.Name("bench"), nats.MaxReconnects(-1))
	if err != nil {
		return restartShareRun{}, fmt.Errorf("bench: connect to the cluster: %w", err)
	}
	defer nc.Close()
	run := restartShareRun{share: chartargs.DefaultPartitions - (n-1)*((chartargs.DefaultPartitions+n-1)/n), load: loadAvg()}
	nd := c.nodes[restartShareNode]
	// The node's restarts before any history: an untimed one first, as
	// below, then rounds timed.
	for i := range rounds + 1 {
		f, err := restartNode(ctx, c, nd, run.share, false)
		if err != nil {
			return run, fmt.Errorf("restart before the history: %w", err)
		}
		if i > 0 {
			run.empty.add(f)
		}
	}
	began := time.Now()
	if err := fillLog(ctx, nc, events, restartShareAgents, SyncAlways); err != nil {
		return restartShareRun{}, fmt.Errorf("fill %d events: %w", events, err)
	}
	filled := time.Now()
	env.Logger.Info("restart-share: filled", "nodes", n, "events", events, "took", filled.Sub(began).Round(time.Millisecond))
	// An untimed restart first: every node's views caught up on the fill.
	if _, err := restartNode(ctx, c, nd, run.share, false); err != nil {
		return run, err
	}
	// The timed rounds measure the stored history, not the last writes.
	if err := waitOutDuplicates(ctx, env, "restart-share", filled); err != nil {
		return run, err
	}
	restart := func(int) error {
		f, err := restartNode(ctx, c, nd, run.share, false)
		run.restart.add(f)
		return err
	}
	rebuild := func(int) error {
		f, err := restartNode(ctx, c, nd, run.share, true)
		run.rebuild.add(f)
		return err
	}
	if err := alternate(rounds, restart, rebuild); err != nil {
		return run, err
	}
	run.load = run.load + "-" + loadAvg()
	return run, nil
}

// restartShareRound is one restart's figures.
type restartShareRound struct {
	took         time.Duration
	cpu, applied float64
}

func (f *restartShareFigures) add(r restartShareRound) {
	if r.took == 0 {
		return
	}
	f.took = append(f.took, r.took)
	f.cpu = append(f.cpu, r.cpu)
	f.applied = append(f.applied, r.applied)
}

// restartNode stops nd with SIGTERM, empties its Pebble dir when rebuild
// is set, starts it and waits until it is ready, holds share partitions
// and its views are caught up; then until the whole cluster is healthy.
func restartNode(ctx context.Context, c *agentdCluster, nd *clusterNode, share int, rebuild bool) (restartShareRound, error) {
	if err := nd.stop(); err != nil {
		return restartShareRound{}, err
	}
	if rebuild {
		if err := os.RemoveAll(filepath.Join(c.dir, nd.name, "data", "pebble")); err != nil {
			return restartShareRound{}, fmt.Errorf("bench: %w", err)
		}
	}
	// The others hold its partitions before it starts again.
	if err := c.waitOthers(ctx, nd, failoverHealthy); err != nil {
		return restartShareRound{}, err
	}
	began := time.Now()
	if err := c.startNode(nd); err != nil {
		return restartShareRound{}, err
	}
	r, err := nd.waitCaughtUp(ctx, began, share)
	if err != nil {
		return r, err
	}
	return r, c.waitHealthy(ctx, failoverHealthy)
}

// waitCaughtUp polls nd until it answers /readyz 200, holds share
// partitions, and its "runs" view has no lag and applies nothing more for
// restartShareStable; the figures are taken at the first poll of that
// stable stretch.
func (nd *clusterNode) waitCaughtUp(ctx context.Context, began time.Time, share int) (restartShareRound, error) {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := began.Add(failoverHealthy)
	var cand restartShareRound
	var candAt time.Time
	for {
		if err := nd.exitErr(); err != nil {
			return restartShareRound{}, fmt.Errorf("bench: %s exited: %v\n%s", nd.name, err, nd.tail())
		}
		at := time.Now()
		h, ok := nd.readyz(client)
		// One page a poll: each is a gather of the node's whole registry,
		// and the node's CPU is what the round measures (two a poll were
		// 9-15% of a restart's CPU samples, docs/benchmarks.md).
		page, err := metricsPage("http://" + nd.metrics + "/metrics")
		cur, rec := cursorsIn(page), valuesIn(page, recoveredMetric, ownedMetric)
		// The node's partitions count as caught up once each it holds
		// finished its recovery (its views applied its events); the lag
		// gauge is not read: after two rebuilds of ten it stood at 232
		// and 418 for minutes on a node recovered and idle.
		done := ok && h.Partitions >= share && err == nil &&
			rec[recoveredMetric] >= float64(share) && rec[recoveredMetric] == rec[ownedMetric]
		if done {
			applied := cur["applied:runs"]
			switch {
			case candAt.IsZero() || applied != cand.applied:
				ticks, err := procTicks(nd.cmd.Process.Pid)
				if err != nil {
					return restartShareRound{}, err
				}
				cand, candAt = restartShareRound{took: at.Sub(began), cpu: float64(ticks) * 10, applied: applied}, at
			case at.Sub(candAt) >= restartShareStable:
				return cand, nil
			}
		} else {
			candAt = time.Time{}
		}
		if time.Now().After(deadline) {
			// Its goroutines' stacks to its log, which the failure keeps.
			nd.dumpStacks()
			return restartShareRound{}, fmt.Errorf("bench: %s not caught up %s after its start: %s; %d partitions recovered of %d owned, runs view lag %v; metrics %v; its goroutines' stacks are in its log\n%s",
				nd.name, failoverHealthy, h, int(rec[recoveredMetric]), int(rec[ownedMetric]), cur["lag:runs"], err, nd.tail())
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return restartShareRound{}, err
		}
	}
}

// The gauges waitCaughtUp reads besides the views': the partitions the
// node holds, and those of them whose recovery finished.
const (
	recoveredMetric = "forever_agentd_partitions_recovered"
	ownedMetric     = "forever_ownership_partitions_owned"
)

// metricValues returns the value of each of names (metrics without labels)
// that the /metrics at url shows.
func metricValues(url string, names ...string) (map[string]float64, error) {
	body, err := metricsPage(url)
	if err != nil {
		return nil, err
	}
	return valuesIn(body, names...), nil
}

// valuesIn is metricValues of a /metrics page already read.
func valuesIn(body []byte, names ...string) map[string]float64 {
	out := map[string]float64{}
	for line := range strings.Lines(string(body)) {
		name, val, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		if v, err := strconv.ParseFloat(val, 64); err == nil {
			out[name] = v
		}
	}
	return out
}

// waitOthers waits until the nodes other than nd are ready, hold every
// partition between them and finished recovering them (their views
// caught up with the partitions nd handed them): a restart timed while
// they still catch up would share the machine with them.
func (c *agentdCluster) waitOthers(ctx context.Context, nd *clusterNode, timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		held, ready := 0, true
		for _, o := range c.nodes {
			if o == nd {
				continue
			}
			h, ok := o.readyz(client)
			rec, err := metricValues("http://"+o.metrics+"/metrics", recoveredMetric, ownedMetric)
			ready = ready && ok && err == nil && rec[recoveredMetric] == rec[ownedMetric]
			held += h.Partitions
		}
		if ready && held >= chartargs.DefaultPartitions {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the others hold %d partitions, ready and recovered: %t, %s after %s stopped", held, ready, timeout, nd.name)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// stop sends SIGTERM and waits (up to a minute, then SIGKILL) for the
// process to exit.
func (nd *clusterNode) stop() error {
	if nd.cmd == nil {
		return nil
	}
	nd.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-nd.exited:
		nd.cmd = nil
		nd.log.Close()
		if err != nil {
			return fmt.Errorf("bench: %s exit after SIGTERM: %w\n%s", nd.name, err, nd.tail())
		}
		return nil
	case <-time.After(time.Minute):
		nd.kill()
		return fmt.Errorf("bench: %s still running a minute after SIGTERM", nd.name)
	}
}

// fillLog appends n events (whole chat turns, n rounded down to 7) to the
// log through nc, spread over agents agents, restartWriters writers
// at a time, each batching per stream (a sharded log's batch goes to one
// shard); each agent's turns stay in order (agent and writer are both the
// turn number modulo).
func fillLog(ctx context.Context, nc *nats.Conn, n, agents int, mode SyncMode) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ls, err := eventlog.ReadStreams(ctx, js)
	if err != nil {
		return err
	}
	lg, err := eventlog.Open(ctx, eventlog.Config{Conn: nc, Bind: true, AsyncBatches: mode == SyncInterval})
	if err != nil {
		return err
	}
	defer lg.Close()
	turns := n / 7
	eg, ectx := errgroup.WithContext(ctx)
	for w := range restartWriters {
		eg.Go(func() error {
			batches := map[string][]eventlog.Event{}
			for t := w; t < turns; t += restartWriters {
				agent := fmt.Sprintf("r%d", t%agents)
				stream := ls.EventsOf(agent)
				evs := append(batches[stream], turnEvents(agent, t)...)
				if len(evs) >= 7*viewsTurnsPB {
					if err := appendRetried(ectx, lg, evs); err != nil {
						return err
					}
					evs = evs[:0]
				}
				batches[stream] = evs
			}
			for _, evs := range batches {
				if len(evs) > 0 {
					if err := appendRetried(ectx, lg, evs); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	return eg.Wait()
}

// median is the nearest-rank p50 of xs, 0 when empty.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)+1)/2-1]
}

// appendRetried appends evs as AppendBatch does, sending them again (the
// same ids) when the answer was lost, as on a loaded machine an atomic
// batch's commit may outlast the ack timeout: a batch stored already is
// refused as a duplicate, which counts as stored.
func appendRetried(ctx context.Context, lg *eventlog.Log, evs []eventlog.Event) error {
	for i := range evs {
		if evs[i].ID == "" {
			evs[i].ID = nuid.Next()
		}
	}
	var err error
	for range 10 {
		if _, err = lg.AppendBatch(ctx, evs); err == nil || errors.Is(err, eventlog.ErrDuplicate) {
			return nil
		}
		if err := sleepCtx(ctx, time.Second); err != nil {
			return err
		}
	}
	return err
}
