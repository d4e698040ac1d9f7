package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/chartargs"
	"github.com/forever-agents/forever/ownership"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Failover scenario parameters.
const (
	failoverKills = 20 // SIGKILLs of an agent's owner at -n 1
	failoverNodes = 3
	// failoverSteps and failoverDelayMS make each kill's steps fiber: an
	// event about every 100 ms for 10 to 20 s of steps, so it still runs
	// when its owner is killed (a loaded machine's requests between the
	// owner seen writing and the kill take seconds) and ends, on the new
	// owner, about when the killed node is back.
	failoverSteps   = 100
	failoverDelayMS = 100
	// failoverProbes bounds the agent ids tried to find one the kill's
	// target node owns (each is owned by a given node about one time in
	// three).
	failoverProbes = 100
	// failoverHealthy bounds the cluster's start, and a killed node's
	// restart until every node is ready and the partitions balanced.
	failoverHealthy = 3 * time.Minute
	// failoverSettle is waited once the cluster is healthy again, before
	// the next kill: the restarted node's partitions have just been handed
	// back to it.
	failoverSettle = 3 * time.Second
	// failoverWriting bounds finding the owner and seeing it write, and
	// waiting for a kill's fiber to complete.
	failoverWriting = 90 * time.Second
	// failoverSeen bounds one wait for the owner's next event.
	failoverSeen = 10 * time.Second
	// failoverRequest is one command request's timeout; a command may wait
	// for a partition's new owner (up to 10 s) and then for its writes.
	failoverRequest = 30 * time.Second
	// failoverTarget is the goal for SIGKILL to the new owner's first
	// event at p99.
	failoverTarget = 3 * time.Second
	// failoverBaseTTL is the lease TTL the KV write cost is compared with.
	failoverBaseTTL = 10 * time.Second
	// failoverQuiet is how long the lease bucket's writes are counted,
	// with the cluster healthy and idle, before the first kill.
	failoverQuiet = 10 * time.Second
)

// failover measures how long an agent is without a writer when the node
// that owns it dies: the time from SIGKILL of the owner's agentd to the
// first event of the agent stored by another node, next to the lease TTL.
//
// It starts a cluster of failoverNodes real agentd processes on loopback
// (go build ./agentd/cmd/agentd), each with the flags and environment the
// Helm chart gives a pod (internal/chartargs: R3 streams and lease bucket,
// --sync always, 64 partitions, the chart's lease TTL). Kill i targets
// node i mod 3, so the victims rotate and so does whether a victim led the
// events stream or the lease bucket (with one agent, its partition would
// always return to the same node, which after its first restart leads no
// stream). Each kill:
//
//   - finds a fresh agent steps:failover-<j> whose owner, by the status
//     command over NATS, is the target, and starts a steps fiber on it
//     (an event about every 100 ms);
//   - follows the agent's events with an ordered consumer through a node
//     that is not the owner, until an event written by the owner arrives
//     (the Forever-Node header);
//   - SIGKILLs the owner, and reads on until an event written by another
//     node arrives. The figure is that event's store time in the stream
//     (the stream leader's timestamp, on the same clock) minus the time of
//     the kill, so neither the reader's reconnection nor its consumer's
//     recreation counts;
//   - restarts the killed node on its data dir and waits until every node
//     answers /readyz 200 (which includes nats-server's healthz: every
//     replica current, so the cluster can lose another node) and the
//     partitions are balanced again, then until the kill's fiber has
//     completed, then failoverSettle more.
//
// When the new owner's log shows when it acquired the agent's partition
// (the "partition acquired" line, minus its recovery's "took"), the kill
// to first event is split into kill to lease acquired: the lease expiring,
// the dead node's key expiring so the partition is assigned to a live node
// (or a whole TTL free), and the lease bucket electing a leader when the
// dead node led it; and lease acquired to first event: the partition's
// recovery and the fiber's, which wait for the events stream to elect a
// leader when the dead node led it and the election is not over yet.
//
// Meanwhile failoverLoadAgents steps agents write without pause
// (failoverstall.go): before each kill the scenario asks each one's owner
// and each events stream's leader, so that an agent owned by the victim or
// in a shard whose events stream it led is the victim's (and one whose
// last event before the kill the victim wrote), the others not;
// after the kill it waits until each wrote again (or the election plus the
// TTL and 10 s passed) and failoverObserve more, and measures each agent
// writing when the kill came: its longest time without a stored event
// since its last one before the kill (above failoverStall it stalled), and
// for the victim's, the kill to their first event. Each kill has a row for
// the others' longest stall (goal: never above 1 s) with both fractions
// stalled, and one for the victim's slowest resumption (goal: within
// failoverElection plus the lease TTL); two more rows sum up every kill.
// -agentd-flags adds flags to every node, such as --shards 8
// --owned-views.
//
// Every wait is bounded: a cluster that loses quorum fails the scenario
// with the nodes' readiness and log tails instead of hanging. The scenario
// runs once per bench run (the chart sets --sync always) and ignores the
// Env's server. p99 over 20 kills is the slowest kill.
func failover(ctx context.Context, env *Env) (_ Result, err error) {
	cc, err := startChartCluster(ctx, env)
	if err != nil {
		return Result{}, err
	}
	defer cc.close(env, &err)
	c, nc, ttl := cc.agentdCluster, cc.nc, cc.ttl
	quietFor := max(2*time.Second, time.Duration(float64(failoverQuiet)*min(1, env.cfg.Scale)))
	writes, err := leaseWritesPerNode(ctx, nc, len(c.nodes), quietFor)
	if err != nil {
		return Result{}, err
	}
	load, err := startStallLoad(ctx, nc, failoverLoadAgents)
	if err != nil {
		return Result{}, err
	}
	bound := failoverElection + ttl
	kills := env.Count(failoverKills, failoverKills)
	var took, leased, recovered, elected, quiet []time.Duration
	var stalls []killStalls
	var victims []string
	probe := 0 // the next agent id to try
	for i := range kills {
		k, err := killOwner(ctx, env.Logger, c, nc, c.nodes[i%len(c.nodes)], &probe, load)
		if err != nil {
			return Result{}, fmt.Errorf("kill %d of %d: %w", i+1, kills, err)
		}
		// The load's agents, until each wrote again (or the bound and
		// more passed) and failoverObserve after; the last second is left
		// out, as its events may still be on their way to the stream.
		if err := load.waitResumed(ctx, k.killed, k.killed.Add(bound+10*time.Second)); err != nil {
			return Result{}, err
		}
		ks, err := load.stalls(ctx, k.share, k.killed, time.Now().Add(-time.Second))
		if err != nil {
			return Result{}, fmt.Errorf("kill %d of %d: %w", i+1, kills, err)
		}
		ks.ledLeases = k.ledLeases
		stalls, victims = append(stalls, ks), append(victims, k.victim.name)
		env.Logger.Info("failover load", "kill", i+1, "victim", k.victim.name, "owned", ks.share.owned, "led shards", ks.share.ledShrd,
			"others stalled", frac(ks.OthersStalled, ks.Others), "others' longest", ks.WorstOther.Round(time.Millisecond), "worst agent", ks.WorstOtherAgent,
			"its gap from", ks.WorstOtherGap.Before.Node, "its gap to", ks.WorstOtherGap.After.Node,
			"victim's stalled", frac(ks.VictimsStalled, ks.Victims), "victim's slowest resume", ks.SlowestResume.Round(time.Millisecond),
			"victim led leases", k.ledLeases)
		took = append(took, k.took)
		if k.ledEvents || k.ledLeases {
			elected = append(elected, k.took)
		} else {
			quiet = append(quiet, k.took)
		}
		if k.leased > 0 {
			leased = append(leased, k.leased)
			recovered = append(recovered, k.took-k.leased)
		}
		env.Logger.Info("failover", "kill", i+1, "of", kills, "agent", k.agent, "victim", k.victim.name, "new owner", k.owner,
			"took", k.took.Round(time.Millisecond), "lease acquired after", k.leased.Round(time.Millisecond),
			"victim led events", k.ledEvents, "victim led leases", k.ledLeases)
		if i == kills-1 {
			break
		}
		if err := k.restart(ctx, c, nc); err != nil {
			return Result{}, fmt.Errorf("kill %d of %d: %w", i+1, kills, err)
		}
		select {
		case <-time.After(failoverSettle):
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
	}
	bl := fmt.Sprintf("lease TTL %s (chart default %s), ms", ttl, chartargs.DefaultLeaseTTL)
	row := func(what string, p float64, d []time.Duration) Row {
		return Row{
			Figure: fmt.Sprintf("%s p%.0f ms, %d kills", what, p, len(d)), Value: millis(percentile(d, p)),
			Baseline: bl, BaselineValue: millis(ttl), LowerIsBetter: true,
		}
	}
	p99 := row("owner SIGKILL to new owner's first event", 99, took)
	// Within failoverTarget: TTL/p99 >= TTL/target.
	p99.Target, p99.TargetNote = float64(ttl)/float64(failoverTarget), fmt.Sprintf("p99 within %s", failoverTarget)
	rows := []Row{row("owner SIGKILL to new owner's first event", 50, took), p99}
	if len(quiet) > 0 {
		rows = append(rows, row("of which victim led neither the events stream nor the lease bucket", 99, quiet))
	}
	if len(elected) > 0 {
		rows = append(rows, row("of which victim led one of them (a JetStream election, 4-9 s)", 50, elected),
			row("of which victim led one of them (a JetStream election, 4-9 s)", 99, elected))
	}
	if len(leased) > 0 {
		rows = append(rows,
			row("of which SIGKILL to lease acquired", 50, leased),
			row("of which SIGKILL to lease acquired", 99, leased),
			row("of which lease acquired to first event", 50, recovered),
			row("of which lease acquired to first event", 99, recovered))
	}
	rows = append(rows, stallRows(stalls, victims, bound, fmt.Sprintf("election %s + lease TTL %s, ms", failoverElection, ttl))...)
	rows = append(rows, Row{Figure: fmt.Sprintf("lease KV writes/s per node, TTL %s", ttl), Value: writes,
		Baseline:      fmt.Sprintf("computed at the %s TTL: (%d/%d leases + 1 node key) per TTL/4", failoverBaseTTL, chartargs.DefaultPartitions, len(c.nodes)),
		BaselineValue: (float64(chartargs.DefaultPartitions)/float64(len(c.nodes)) + 1) / (failoverBaseTTL / 4).Seconds(), LowerIsBetter: true})
	return Result{Rows: rows}, nil
}

// failoverKill is what one kill measured.
type failoverKill struct {
	agent     string
	victim    *clusterNode
	owner     string        // the new owner's name
	took      time.Duration // SIGKILL to the new owner's first event stored
	leased    time.Duration // SIGKILL to lease acquired; 0 when unknown
	ledEvents bool          // the victim led the agent's events stream (its shard's)
	ledLeases bool          // the victim led the lease bucket's stream
	killed    time.Time     // when the victim was SIGKILLed
	share     loadShare     // the load agents the victim held
}

// restart starts the killed node again and waits until the cluster is
// healthy and the kill's fiber has completed.
func (k failoverKill) restart(ctx context.Context, c *agentdCluster, nc *nats.Conn) error {
	if err := c.startNode(k.victim); err != nil {
		return err
	}
	if err := c.waitHealthy(ctx, failoverHealthy); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, failoverWriting)
	defer cancel()
	for {
		st, err := agentStatus(wctx, nc, k.agent)
		if err != nil {
			return err
		}
		if st.Fibers == 0 {
			return nil
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-wctx.Done():
			return fmt.Errorf("bench: the steps fiber of %s still running %s after the cluster was healthy again", k.agent, failoverWriting)
		}
	}
}

// failoverAttempts bounds the fresh agents tried for one kill, when the
// owner is not seen writing the agent after its fiber started.
const failoverAttempts = 3

// killOwner finds a fresh agent that target owns, starts a steps fiber on
// it, sees target write it, SIGKILLs target and waits for another node's
// first event of the agent. *probe is the next agent id to try. Before
// the fiber starts it takes the victim's share of load (shareOf).
func killOwner(ctx context.Context, logger *slog.Logger, c *agentdCluster, nc *nats.Conn, target *clusterNode, probe *int, load *stallMonitor) (failoverKill, error) {
	var (
		k   failoverKill
		st  failoverStatus
		f   *failoverFollow
		err error
	)
	// The victim's share of the load, read before the tracked fiber
	// starts: it asks every load agent's status, seconds on a loaded
	// machine, and a fiber that ended before its owner was killed leaves
	// nothing for another node to write (the kill measured nothing; twice
	// on CI the share's reads outlasted the fiber's 5 s). The partitions
	// stay where they are meanwhile: the cluster is settled.
	share, err := load.shareOf(ctx, nc, target.name)
	if err != nil {
		return k, err
	}
	for attempt := 1; f == nil; attempt++ {
		k, st, f, err = ownerWriting(ctx, c, nc, target, probe)
		if err == nil {
			break
		}
		var notSeen *notSeenError
		if !errors.As(err, &notSeen) || attempt == failoverAttempts {
			return k, err
		}
		// Not a failover figure, but worth knowing: a fiber that started
		// and wrote nothing the reader saw for seconds.
		logger.Warn("failover: owner not seen writing; trying another agent", "err", err)
	}
	defer f.close()
	k.share = share
	k.ledEvents = streamLeader(ctx, nc, eventsStreamOf(ctx, nc, k.agent)) == target.name
	k.ledLeases = streamLeader(ctx, nc, "KV_"+ownership.DefaultBucket) == target.name
	killed := time.Now()
	k.killed = killed
	target.kill()
	fctx, cancel := context.WithTimeout(ctx, 4*c.ttl+30*time.Second)
	defer cancel()
	e, err := f.next(fctx, func(w eventlog.Token) bool { return w.Node != "" && w.Node != target.name })
	if err != nil {
		return k, fmt.Errorf("bench: no other node wrote %s after its owner %s was killed: %w (%s)", k.agent, target.name, err, statusNow(ctx, nc, k.agent))
	}
	k.owner, k.took = e.writer.Node, e.stored.Sub(killed)
	if nd := c.node(k.owner); nd != nil {
		if at, ok := partitionAcquired(ctx, nd, st.Partition, st.Epoch, killed); ok {
			k.leased = at.Sub(killed)
		}
	}
	return k, nil
}

// notSeenError is ownerWriting's error when the fiber started but the
// owner was not seen writing its agent.
type notSeenError struct {
	agent string
	err   error
}

func (e *notSeenError) Error() string {
	return fmt.Sprintf("bench: owner not seen writing %s: %v", e.agent, e.err)
}

func (e *notSeenError) Unwrap() error { return e.err }

// ownerWriting finds a fresh agent that target owns, starts a steps fiber
// on it, and follows its events through another node until target is seen
// writing it. The caller closes the returned follow. Errors: *notSeenError
// when no event of target's arrived within failoverSeen, or another node's
// did (the partition moved).
func ownerWriting(ctx context.Context, c *agentdCluster, nc *nats.Conn, target *clusterNode, probe *int) (failoverKill, failoverStatus, *failoverFollow, error) {
	wctx, cancel := context.WithTimeout(ctx, failoverWriting)
	defer cancel()
	k := failoverKill{victim: target}
	var st failoverStatus
	for tries := 0; ; tries++ {
		if tries == failoverProbes {
			return k, st, nil, fmt.Errorf("bench: none of %d agents is owned by %s", failoverProbes, target.name)
		}
		k.agent = fmt.Sprintf("steps:failover-%d", *probe)
		*probe++
		var err error
		if st, err = agentStatus(wctx, nc, k.agent); err != nil {
			return k, st, nil, err
		}
		if st.Owner == target.name {
			break
		}
	}
	var via *clusterNode
	for _, nd := range c.nodes {
		if nd != target {
			via = nd
			break
		}
	}
	f, err := followAgent(wctx, via, k.agent)
	if err != nil {
		return k, st, nil, err
	}
	start := fmt.Appendf(nil, `{"steps":%d,"delayMs":%d}`, failoverSteps, failoverDelayMS)
	if _, err := agentCommand(wctx, nc, k.agent, "start", start); err != nil {
		f.close()
		return k, st, nil, err
	}
	// The owner must be seen writing: it may have handed the partition off
	// since it answered the status (a node that just restarted takes its
	// share back).
	sctx, cancelSeen := context.WithTimeout(wctx, failoverSeen)
	defer cancelSeen()
	e, err := f.next(sctx, func(w eventlog.Token) bool { return w.Node != "" })
	if err == nil && e.writer.Node != target.name {
		err = fmt.Errorf("written by %s, its status named %s", e.writer.Node, target.name)
	}
	if err != nil {
		f.close()
		if ctx.Err() != nil {
			return k, st, nil, ctx.Err()
		}
		return k, st, nil, &notSeenError{agent: k.agent, err: fmt.Errorf("via %s, within %s of its fiber's start: %w", via.name, failoverSeen, err)}
	}
	return k, st, f, nil
}

// failoverStatus is the part of agentd's status reply the scenario uses.
type failoverStatus struct {
	Fibers    int    `json:"fibers"`
	Partition int    `json:"partition"`
	Owner     string `json:"owner"`
	Epoch     uint64 `json:"epoch"`
}

// statusNow says, for an error's message, who owns agent now and how many
// fibers it runs, or why that is unknown.
func statusNow(ctx context.Context, nc *nats.Conn, agent string) string {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := agentStatus(sctx, nc, agent)
	if err != nil {
		return fmt.Sprintf("its status now: %v", err)
	}
	return fmt.Sprintf("its status now: owner %s, partition %d, epoch %d, %d fibers", st.Owner, st.Partition, st.Epoch, st.Fibers)
}

// agentStatus asks the agent's status.
func agentStatus(ctx context.Context, nc *nats.Conn, agent string) (failoverStatus, error) {
	var st failoverStatus
	data, err := agentCommand(ctx, nc, agent, "status", nil)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("bench: status of %s: %w", agent, err)
	}
	if st.Owner == "" {
		return st, fmt.Errorf("bench: status of %s names no owner: %s", agent, data)
	}
	return st, nil
}

// agentCommand sends a command over NATS and returns the reply, retrying
// while the request times out or is answered 503 (the agent is between
// owners: nothing ran) until ctx ends.
func agentCommand(ctx context.Context, nc *nats.Conn, agent, verb string, data []byte) (json.RawMessage, error) {
	subject := "forever.cmd." + agent + "." + verb
	var last error
	for {
		rctx, cancel := context.WithTimeout(ctx, failoverRequest)
		msg, err := nc.RequestWithContext(rctx, subject, data)
		cancel()
		switch {
		case err == nil && msg.Header.Get("Nats-Service-Error-Code") == "":
			return msg.Data, nil
		case err == nil && msg.Header.Get("Nats-Service-Error-Code") != "503":
			return nil, fmt.Errorf("bench: %s %s: %s %s", agent, verb, msg.Header.Get("Nats-Service-Error-Code"), msg.Data)
		case err == nil:
			last = fmt.Errorf("503 %s", msg.Data)
		default:
			last = err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bench: %s %s: %w (last: %v)", agent, verb, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// streamLeader returns the server name of the stream's leader, empty when
// unknown.
func streamLeader(ctx context.Context, nc *nats.Conn, stream string) string {
	js, err := jetstream.New(nc)
	if err != nil {
		return ""
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := js.Stream(ictx, stream)
	if err != nil || s.CachedInfo().Cluster == nil {
		return ""
	}
	return s.CachedInfo().Cluster.Leader
}

// eventsStreamOf returns the name of the stream of agent's events: the
// events stream, or of a sharded cluster the agent's shard's.
func eventsStreamOf(ctx context.Context, nc *nats.Conn, agent string) string {
	js, err := jetstream.New(nc)
	if err != nil {
		return eventlog.DefaultEventsStream
	}
	ls, err := eventlog.ReadStreams(ctx, js)
	if err != nil {
		return eventlog.DefaultEventsStream
	}
	return ls.EventsOf(agent)
}

// failoverFollow reads an agent's new events through one node with
// bounded polls: each poll creates a consumer from the next unread
// sequence, fetches what is there and deletes it. A live ordered consumer
// was used before, and hung recreating itself when the server it lived on
// was the one killed (CI's TestRunSmoke then waited out its deadline with
// the new owner writing); a poll that fails is just tried again.
type failoverFollow struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  string
	subject string
	from    uint64 // the next stream sequence to read
	last    error  // the last poll's error, for the deadline's message
}

// followedEvent is one event of a failoverFollow: its writer and the time
// the stream stored it.
type followedEvent struct {
	writer eventlog.Token
	stored time.Time
}

// Follow poll bounds: one poll's consumer creation and fetch, and the
// pause between polls.
const (
	followPollTimeout = 5 * time.Second
	followFetchWait   = time.Second
	followPause       = 50 * time.Millisecond
)

// followAgent starts reading the agent's events appended from now on,
// through nd.
func followAgent(ctx context.Context, nd *clusterNode, agent string) (*failoverFollow, error) {
	nc, err := nats.Connect("nats://"+nd.natsAddr, nats.Name("bench-follow"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("bench: connect to %s: %w", nd.name, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bench: jetstream: %w", err)
	}
	ls, err := eventlog.ReadStreams(ctx, js)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bench: the log's streams through %s: %w", nd.name, err)
	}
	f := &failoverFollow{nc: nc, js: js, stream: ls.EventsOf(agent), subject: ls.EventsSubject(eventlog.DefaultPrefix, agent)}
	s, err := js.Stream(ctx, f.stream)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bench: follow %s through %s: %w", agent, nd.name, err)
	}
	f.from = s.CachedInfo().State.LastSeq + 1
	return f, nil
}

// next returns the first event whose writer matches, skipping the others.
func (f *failoverFollow) next(ctx context.Context, match func(eventlog.Token) bool) (followedEvent, error) {
	for {
		e, found, err := f.poll(ctx, match)
		if found {
			return e, nil
		}
		if err != nil {
			f.last = err
		}
		select {
		case <-ctx.Done():
			if f.last != nil {
				return followedEvent{}, fmt.Errorf("%w (the last read: %v)", ctx.Err(), f.last)
			}
			return followedEvent{}, ctx.Err()
		case <-time.After(followPause): // not a synchronisation: a poll's pause
		}
	}
}

// poll reads what the stream holds of the agent from f.from on, up to the
// first event whose writer matches.
func (f *failoverFollow) poll(ctx context.Context, match func(eventlog.Token) bool) (followedEvent, bool, error) {
	pctx, cancel := context.WithTimeout(ctx, followPollTimeout)
	defer cancel()
	cons, err := f.js.CreateConsumer(pctx, f.stream, jetstream.ConsumerConfig{
		FilterSubject:     f.subject,
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       f.from,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: 10 * time.Second,
		MemoryStorage:     true,
		Replicas:          1,
	})
	if err != nil {
		return followedEvent{}, false, err
	}
	name := cons.CachedInfo().Name
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), followPollTimeout)
		defer cancel()
		_ = f.js.DeleteConsumer(dctx, f.stream, name) // the inactive threshold removes it otherwise
	}()
	batch, err := cons.Fetch(100, jetstream.FetchMaxWait(followFetchWait))
	if err != nil {
		return followedEvent{}, false, err
	}
	for m := range batch.Messages() {
		md, err := m.Metadata()
		if err != nil {
			continue
		}
		f.from = md.Sequence.Stream + 1
		if w, _ := eventlog.WriterOf(m.Headers()); match(w) {
			return followedEvent{writer: w, stored: md.Timestamp}, true, nil
		}
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
		return followedEvent{}, false, err
	}
	return followedEvent{}, false, nil
}

func (f *failoverFollow) close() { f.nc.Close() }

// partitionAcquired returns when nd acquired partition p under an epoch
// above epoch after the time after, from its log: the time of its
// "partition acquired" line minus the recovery that line reports. It
// waits a few seconds for the line, which comes when the recovery ends.
func partitionAcquired(ctx context.Context, nd *clusterNode, p int, epoch uint64, after time.Time) (time.Time, bool) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if at, ok := findAcquired(nd.logPath, p, epoch, after); ok {
			return at, true
		}
		if time.Now().After(deadline) {
			return time.Time{}, false
		}
		select {
		case <-ctx.Done():
			return time.Time{}, false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// findAcquired scans an agentd JSON log for partitionAcquired.
func findAcquired(path string, p int, epoch uint64, after time.Time) (time.Time, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, []byte(`"partition acquired"`)) {
			continue
		}
		var l struct {
			Time      time.Time `json:"time"`
			Msg       string    `json:"msg"`
			Partition *int      `json:"partition"`
			Epoch     uint64    `json:"epoch"`
			Took      int64     `json:"took"` // slog's JSON handler writes durations in ns
		}
		if json.Unmarshal(line, &l) != nil || l.Msg != "partition acquired" || l.Partition == nil || *l.Partition != p {
			continue
		}
		if at := l.Time.Add(-time.Duration(l.Took)); l.Epoch > epoch && at.After(after) {
			return at, true
		}
	}
	return time.Time{}, false
}

// leaseWritesPerNode counts the writes to the lease bucket (renewals and
// node heartbeats) over d, per node.
func leaseWritesPerNode(ctx context.Context, nc *nats.Conn, nodes int, d time.Duration) (float64, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	last := func() (uint64, error) {
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		s, err := js.Stream(ictx, "KV_"+ownership.DefaultBucket)
		if err != nil {
			return 0, fmt.Errorf("bench: lease bucket: %w", err)
		}
		return s.CachedInfo().State.LastSeq, nil
	}
	before, err := last()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	after, err := last()
	if err != nil {
		return 0, err
	}
	return float64(after-before) / time.Since(start).Seconds() / float64(nodes), nil
}
