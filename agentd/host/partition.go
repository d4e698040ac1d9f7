package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/backoff"
	"github.com/forever-agents/forever/ownership"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
)

// deactivateTimeout bounds an agent's OnDeactivate hook.
const deactivateTimeout = 10 * time.Second

// partitionOf returns the partition of an agent id.
func (h *Host) partitionOf(id string) int {
	return ownership.PartitionOf(id, h.own.Partitions())
}

// Owns reports whether this node serves agent's partition now.
func (h *Host) Owns(agent string) bool { return h.ownsPartition(h.partitionOf(agent)) }

// ReadsOnOwner reports whether a read of agent's views must go to its
// owner: with owned views (eventlog.Config.OwnedViews) this node's views
// hold only the partitions it owns, and it does not own agent's now. A
// command is routed there anyway; a read served outside the command path
// (the AI SDK gateway's, the events stream's first state) asks the owner
// with the read verb instead of reading this node's views.
func (h *Host) ReadsOnOwner(agent string) bool {
	return h.deps != nil && h.deps.Log.OwnedViews() && !h.Owns(agent)
}

// ownsPartition reports whether this node serves partition p now.
func (h *Host) ownsPartition(p int) bool { return h.servedPart(p) != nil }

// servedPart returns partition p's part while this node serves it, or nil.
func (h *Host) servedPart(p int) *part {
	h.mu.Lock()
	pt := h.mu.parts[p]
	h.mu.Unlock()
	if pt == nil || pt.ctx.Err() != nil {
		return nil
	}
	return pt
}

// awaitPartition waits until partition p's recovery started on this node
// (servePartition closes part.recovered once the views caught p up): owned
// is false when this node does not serve p, or stops serving it
// meanwhile; err is a 503 when ctx ends first.
func (h *Host) awaitPartition(ctx context.Context, p int) (owned bool, err error) {
	pt := h.servedPart(p)
	if pt == nil {
		return false, nil
	}
	select {
	case <-pt.recovered:
		return true, nil
	case <-pt.ctx.Done():
		return false, nil
	case <-ctx.Done():
		return true, ErrUnavailable.Wrapf("%w (waiting for partition %d's views to catch up on node %s)", ctx.Err(), p, h.own.Node())
	}
}

// notOwner is the error of a command for an agent whose partition this node
// does not serve: retryable, 503.
func (h *Host) notOwner(id string, p int) error {
	return ErrUnavailable.Wrapf("not the agent's owner: agent %q is in partition %d, which node %s does not own now",
		id, p, h.own.Node()).WithCause(eventlog.ErrNotOwner)
}

// servePartition runs for as long as this node holds the lease of partition
// l.Partition. Taking a partition over runs what a restart runs, for that
// partition only: catch the views up with the log (so they hold the last
// events of the previous owner), recover the orphaned fibers and interrupted
// turns of its agents, and let the scheduler fire its overdue schedules.
// When ctx ends (the lease is lost or handed off) it stops the partition's
// agents, interrupting their fibers (their rows stay for the next owner),
// and returns once they have stopped.
func (h *Host) servePartition(ctx context.Context, l ownership.Lease) {
	pt := &part{lease: l, ctx: ctx, recovered: make(chan struct{})}
	// With owned views the views follow the partition from now on, and
	// recovery (WaitFor of the log's end) waits for them to catch it up.
	// Before the partition is served: an agent a command activates
	// recovers its fibers from the views once they applied its last
	// event, which a WaitFor begun before the follow would not wait for.
	following := h.followPartition(l.Partition)
	// counted: the partition is in forever_agentd_partitions_recovered.
	var counted bool
	h.mu.Lock()
	h.mu.parts[l.Partition] = pt
	h.mu.Unlock()
	defer func() {
		release := h.startPartitionSpan(spanPartitionRelease, l.Partition, l.Epoch)
		if c := context.Cause(ctx); c != nil && release.IsRecording() {
			release.SetAttributes(attribute.String("forever.partition.cause", c.Error()))
		}
		defer release.End() // once the partition's agents have stopped
		if counted {
			h.recovered.Dec()
		}
		h.stopPartition(l.Partition)
		if following {
			// Once its agents stopped: the views keep its rows.
			_ = h.deps.Log.UnfollowPartition(l.Partition)
		}
		h.mu.Lock()
		if h.mu.parts[l.Partition] == pt {
			delete(h.mu.parts, l.Partition)
		}
		h.mu.Unlock()
		h.sched.Poke()
	}()
	logger := h.logger.With("partition", l.Partition, "epoch", l.Epoch)
	start := time.Now()
	span := h.startPartitionSpan(spanPartitionAcquire, l.Partition, l.Epoch)
	// Recovery reads the log's last sequence from the stream leader, which
	// may be moving (the previous owner's server in lame duck mode): it is
	// retried until it succeeds or the partition goes, so no agent of the
	// partition is left unrecovered.
	var n int
	var caughtUp time.Time // when the views held the partition's events
	for attempt := 0; ; attempt++ {
		var err error
		n, err = h.recoverPartition(ctx, l.Partition, &caughtUp)
		if err == nil || ctx.Err() != nil {
			break
		}
		logger.Warn("recover partition; retrying", "attempt", attempt+1, "err", err)
		select {
		case <-time.After(backoff.Exp(100*time.Millisecond, 5*time.Second, attempt)):
		case <-ctx.Done():
		}
	}
	close(pt.recovered)
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("forever.partition.agents_recovering", n))
	}
	if ctx.Err() != nil {
		span.SetStatus(codes.Error, context.Cause(ctx).Error())
		span.End()
		return
	}
	span.End()
	if h.recovered != nil {
		h.recovered.Inc()
		counted = true
	}
	// A node's leases, taken at start and handed off when it stops, are a
	// line each of the lease manager's ("partition leases taken",
	// "partitions handed off"). A partition is worth a line of its own
	// when it brings agents to recover (a failover), or when it goes while
	// the node runs; else it is DEBUG.
	level := slog.LevelDebug
	if n > 0 {
		level = slog.LevelInfo
	}
	logger.Log(ctx, level, "partition acquired", "agents_recovering", n, "took", time.Since(start),
		"views_caught_up", caughtUp.Sub(start))
	h.sched.Poke()
	<-ctx.Done()
	// A partition handed off by a rebalance is in the lease manager's one
	// line ("partitions rebalanced"), as are those of a stopping node;
	// one lost otherwise (its lease could not be renewed) is a line.
	level = slog.LevelInfo
	select {
	case <-h.stopping:
		level = slog.LevelDebug
	default:
		if errors.Is(context.Cause(ctx), ownership.ErrHandoff) {
			level = slog.LevelDebug
		}
	}
	logger.Log(context.WithoutCancel(ctx), level, "partition released", "cause", context.Cause(ctx))
}

// recoverPartition catches the runs and schedules views up with the whole
// events stream (with owned views: every view with partition p's events),
// then activates every agent of partition p that has a runs
// row (activation recovers its orphaned fibers). It returns how many agents
// it activated, and sets caughtUp to when the views were caught up.
func (h *Host) recoverPartition(ctx context.Context, p int, caughtUp *time.Time) (int, error) {
	select {
	case <-h.table.Ready():
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if h.deps.Log.OwnedViews() {
		// The runs table and the schedules are views of Deps.Views
		// (start): one wait for partition p's events covers them and
		// every other view, whose reads of p's agents are answered here
		// from now on. Only p's: another partition catching up, or
		// another shard electing its leader, does not hold p's agents.
		if err := h.deps.Views.WaitPartition(ctx, p); err != nil {
			return 0, err
		}
	} else {
		last, err := h.deps.Log.LastSeq(ctx, eventlog.Filter{})
		if err != nil {
			return 0, err
		}
		if err := h.table.WaitFor(ctx, last); err != nil {
			return 0, err
		}
		if err := h.sched.WaitFor(ctx, last); err != nil {
			return 0, err
		}
	}
	*caughtUp = time.Now()
	rows, err := h.table.Rows("")
	switch {
	case errors.Is(err, eventlog.ErrCorrupt):
		h.logger.Error("reading the runs table; corrupt rows are skipped", "partition", p, "err", err)
	case err != nil:
		// A truncated scan is not a complete one: recover nothing rather
		// than some.
		return 0, fmt.Errorf("read the runs table: %w", err)
	}
	seen := map[string]bool{}
	for _, r := range rows {
		if seen[r.Agent] || h.partitionOf(r.Agent) != p {
			continue
		}
		seen[r.Agent] = true
		if _, err := h.activate(ctx, r.Agent); err != nil && ctx.Err() == nil {
			h.logger.Error("activate agent for recovery", "agent", r.Agent, "err", err)
		}
	}
	return len(seen), nil
}

// stopPartition deactivates the partition's agents and waits for them.
func (h *Host) stopPartition(p int) {
	h.mu.Lock()
	var stop []*instance
	for id, inst := range h.mu.agents {
		if inst.part == p {
			delete(h.mu.agents, id)
			stop = append(stop, inst)
		}
	}
	h.mu.Unlock()
	for _, inst := range stop {
		<-inst.built
		if inst.err == nil {
			h.deactivate(inst)
		}
	}
}

// fenced stops an agent another node wrote: this node must not write it
// again until it holds a newer lease (the daemon then re-reads the lease).
func (h *Host) fenced(agent string, err error) {
	h.mu.Lock()
	inst := h.mu.agents[agent]
	if inst != nil {
		delete(h.mu.agents, agent)
	}
	h.mu.Unlock()
	if inst == nil {
		return
	}
	h.logger.Warn("another node wrote the agent: stopping it here", "agent", agent, "err", err)
	<-inst.built
	if inst.err == nil {
		h.deactivate(inst)
	}
	go h.refence(agent)
}

// refence restarts a fenced agent from the log when this node still holds
// its partition's lease once read again from the server: the conflicting
// write came from a writer that had lost the agent and did not know yet.
// Without this the agent would stay stopped until the lease moved.
func (h *Host) refence(agent string) {
	p := h.partitionOf(agent)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := h.own.Check(ctx, p)
	cancel()
	if err != nil {
		return
	}
	_, pctx, ok := h.own.Owned(p)
	if !ok || pctx.Err() != nil {
		return // the lease moved: the new owner has the agent
	}
	select {
	case <-time.After(restartDelay):
	case <-pctx.Done():
		return
	}
	h.logger.Warn("fenced while still holding the lease: restarting the agent from the log", "agent", agent, "partition", p)
	h.deps.Log.Unfence(agent)
	if _, err := h.activate(pctx, agent); err != nil && pctx.Err() == nil {
		h.logger.Error("restart fenced agent", "agent", agent, "err", err)
	}
}

// awaitStartup waits until the runs table is caught up, the first round of
// leases was taken, and each partition then held started its recovery.
func (h *Host) awaitStartup(ctx context.Context) error {
	for _, ch := range []<-chan struct{}{h.table.Ready(), h.own.Ready()} {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	h.mu.Lock()
	var waits []<-chan struct{}
	for _, pt := range h.mu.parts {
		waits = append(waits, pt.recovered)
	}
	h.mu.Unlock()
	for _, ch := range waits {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// callDeactivate runs the agent's OnDeactivate, bounded: a hook that hangs
// is logged and left behind rather than blocking the host.
func (h *Host) callDeactivate(inst *instance, d Deactivator) {
	ctx, cancel := context.WithTimeout(context.Background(), deactivateTimeout)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.OnDeactivate(ctx)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		inst.env.Logger.Warn("OnDeactivate did not return in time; going on without it", "timeout", deactivateTimeout)
	}
}

// restartDelay is how long a host waits before restarting an agent whose
// fiber was orphaned by a log outage (a stream electing its leader).
const restartDelay = time.Second

// restartLater restarts inst after restartDelay, unless its partition goes
// first: a fiber whose end could not be recorded stays in the runs table,
// and only an activation recovers it. The agent's other fibers are
// interrupted and recovered with it. A fiber orphaned by a write whose
// answer a leader change lost (eventlog.ErrLeaderElected) is restarted
// at once: its stream has a leader again. Waiting the second made an
// agent of a shard whose leader was moved stall 1.3 s (a chaos run, stop
// 62).
func (h *Host) restartLater(partCtx context.Context, inst *instance, cause error) {
	delay := restartDelay
	if errors.Is(cause, eventlog.ErrLeaderElected) {
		delay = 0
	}
	go func() {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-partCtx.Done():
			return
		}
		h.mu.Lock()
		if h.mu.agents[inst.id] != inst {
			h.mu.Unlock()
			return // already deactivated or replaced
		}
		delete(h.mu.agents, inst.id)
		h.mu.Unlock()
		h.logger.Warn("restarting agent to recover an orphaned fiber", "agent", inst.id, "cause", cause)
		h.deactivate(inst)
		if _, err := h.activate(partCtx, inst.id); err != nil && partCtx.Err() == nil {
			h.logger.Error("restart agent", "agent", inst.id, "err", err)
		}
	}()
}

// storeLost is the host's agentd.StoreLostFunc: the events stream lost the
// agents' events under this node. Every active agent is stopped (fibers
// interrupted; their history is gone, so nothing is recovered), and those
// that handle it end what they were streaming (StoreLostHandler) while the
// views still show it. No agent is activated until resume, once the views
// were rebuilt from the stream as it is now: a command meanwhile is 503.
func (h *Host) storeLost(ctx context.Context, stream string, loss agentd.Loss) func() {
	if stream != h.deps.Log.EventsStream() {
		return nil
	}
	cause := fmt.Errorf("agentd: the agent's history is lost: stream %s was %s", stream, loss.Kind)
	h.mu.Lock()
	h.mu.rebuilding = ErrUnavailable.Wrapf("the agent's history is lost: stream %s was %s; the views are being rebuilt", stream, loss.Kind).WithCause(cause)
	agents := h.mu.agents
	h.mu.agents = map[string]*instance{}
	h.mu.Unlock()
	h.logger.Warn("stopping every agent: the log lost their events", "stream", stream, "agents", len(agents))
	for _, inst := range agents {
		<-inst.built
		if inst.err != nil {
			continue
		}
		h.stop(inst)
		if sl, ok := inst.agent.(StoreLostHandler); ok {
			sctx, cancel := context.WithTimeout(ctx, deactivateTimeout)
			sl.OnStoreLost(sctx, cause)
			cancel()
		}
	}
	return func() {
		h.mu.Lock()
		h.mu.rebuilding = nil
		h.mu.Unlock()
	}
}

// followPartition makes the views of a log with owned views
// (--owned-views) follow partition p; it reports whether they do.
func (h *Host) followPartition(p int) bool {
	if h.deps == nil || !h.deps.Log.OwnedViews() {
		return false
	}
	if err := h.deps.Log.FollowPartition(p); err != nil {
		h.logger.Error("follow the partition's views", "partition", p, "err", err)
		return false
	}
	return true
}
