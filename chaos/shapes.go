package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/ownership"
)

// The shapes of a cluster run besides kills and freezes (issue 33), each
// placed at random between two kills: a stepdown forces the events
// stream's JetStream leader to step down, so the cluster is in an election
// while a turn's first writes are in flight; a handoff stops the node that
// owns such a turn's agent with SIGTERM, so its partitions move to the
// other nodes (and back when it restarts) without a kill. In both, every
// chat command in flight that has an identity is sent again meanwhile, as a
// client whose reply is late sends it (resendInFlight).
const (
	shapeStepdown = "stepdown"
	shapeHandoff  = "handoff"
)

// Timeouts of the shapes' resends: one attempt of a resend in a stepdown
// gives up before the election is over, so it is sent again while the
// turn's writes are unsettled; one in a handoff waits longer, as a command
// may wait for the partition's new owner.
const (
	stepdownResendTimeout = time.Second
	handoffResendTimeout  = 3 * time.Second
	resendAttempts        = 10
	// sendWait bounds the wait for a chat command's send before a shape:
	// right after a kill or a handoff every turn may stall for a lease TTL.
	sendWait = 10 * time.Second
)

// planShapes places stepdowns and handoffs between kills: each goes into
// one of the kills+1 gaps (gap k runs after k kills, gap kills after the
// last), in random order. Without shapes it draws nothing from rng.
func planShapes(rng *rand.Rand, kills, stepdowns, handoffs int) map[int][]string {
	var all []string
	for range stepdowns {
		all = append(all, shapeStepdown)
	}
	for range handoffs {
		all = append(all, shapeHandoff)
	}
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	plan := map[int][]string{}
	for _, s := range all {
		gap := rng.IntN(kills + 1)
		plan[gap] = append(plan[gap], s)
	}
	return plan
}

// shaper carries out the planned shapes.
type shaper struct {
	plan map[int][]string
	rng  *rand.Rand
	l    *load
	ns   *nodes
	// admin reaches the load's JetStream API and the cluster subject of
	// its account; pool are connections the resends go over, at least one
	// per node.
	admin  *nats.Conn
	prefix string
	pool   []*nats.Conn
	ttl    time.Duration
	// disrupting, when set, is told before each shape (the stall watch's
	// measure of the kill before ends there).
	disrupting func()
}

// runGap runs the shapes planned after kills kills, once.
func (sh *shaper) runGap(ctx context.Context, kills int, res *results, logf func(string, ...any)) error {
	shapes := sh.plan[kills]
	delete(sh.plan, kills)
	for _, s := range shapes {
		sleep(ctx, time.Duration(500+sh.rng.IntN(1500))*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := sh.ns.waitAllReady(ctx); err != nil {
			return err
		}
		if sh.disrupting != nil {
			sh.disrupting()
		}
		var err error
		switch s {
		case shapeStepdown:
			sh.stepdown(ctx, res, logf)
		case shapeHandoff:
			err = sh.handoff(ctx, res, logf)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// stepdown waits for a chat command's send, forces the events stream's
// leader to step down at once, and sends every chat command in flight
// again with a short timeout while the stream elects its next leader.
func (sh *shaper) stepdown(ctx context.Context, res *results, logf func(string, ...any)) {
	began := time.Now()
	agent := sh.l.nextSend(ctx, sendWait)
	waited := time.Since(began)
	res.stepdowns++
	stream := eventsStreamOf(ctx, sh.admin, agent)
	err := stepdownLeader(ctx, sh.admin, stream)
	n := sh.l.resendInFlight(ctx, sh.pool, "", stepdownResendTimeout)
	if err != nil {
		res.stepdownsRefused++
		logf("stepdown %d: %s refused (%v), %s; %d chats in flight resent", res.stepdowns, stream, err, sentWhen(agent, waited), n)
		return
	}
	logf("stepdown %d: %s leader stepped down, %s; %d chats in flight resent", res.stepdowns, stream, sentWhen(agent, waited), n)
}

// eventsStreamOf returns the events stream whose leader a stepdown moves:
// FOREVER_EVENTS, or of a sharded cluster (--shards) the shard of the
// agent just sent to (shard 0's without one).
func eventsStreamOf(ctx context.Context, nc *nats.Conn, agent string) string {
	js, err := jetstream.New(nc)
	if err != nil {
		return eventlog.DefaultEventsStream
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ls, err := eventlog.ReadStreams(rctx, js)
	if err != nil {
		return eventlog.DefaultEventsStream
	}
	if agent == "" {
		return ls.Events[0]
	}
	return ls.EventsOf(agent)
}

// sentWhen says which chat a shape followed.
func sentWhen(agent string, waited time.Duration) string {
	if agent == "" {
		return fmt.Sprintf("no chat sent within %s", waited.Round(time.Millisecond))
	}
	return fmt.Sprintf("just after a chat to %s (sent %s into the wait)", agent, waited.Round(time.Millisecond))
}

// stepdownLeader asks JetStream to move stream's leader to another
// replica ($JS.API.STREAM.LEADER.STEPDOWN), as nats stream cluster
// step-down does.
func stepdownLeader(ctx context.Context, nc *nats.Conn, stream string) error {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msg, err := nc.RequestWithContext(rctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil)
	if err != nil {
		return err
	}
	var reply struct {
		Success bool `json:"success"`
		Error   *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		return fmt.Errorf("stepdown reply %q: %w", msg.Data, err)
	}
	if reply.Error != nil {
		return fmt.Errorf("%d %s", reply.Error.Code, reply.Error.Description)
	}
	if !reply.Success {
		return errors.New("stepdown not done")
	}
	return nil
}

// handoff waits for a chat command's send, stops the node that owns its
// agent with SIGTERM (it hands off its partitions on its way out), sends
// every chat command in flight again over the other nodes meanwhile, and
// restarts the node after a random part of a lease TTL, which moves
// partitions back to it: chats in flight are sent again then too.
func (sh *shaper) handoff(ctx context.Context, res *results, logf func(string, ...any)) error {
	began := time.Now()
	agent := sh.l.nextSend(ctx, sendWait)
	when := sentWhen(agent, time.Since(began))
	if agent == "" {
		// The agent of a chat in flight, whose turn runs or waits.
		agent = sh.l.inFlight(sh.rng)
	}
	d, owner := sh.ns.list[sh.rng.IntN(len(sh.ns.list))], "a random node"
	if agent != "" {
		if name, err := ownerOf(ctx, sh.admin, sh.prefix, agent); err != nil {
			logf("handoff: the owner of %q: %v", agent, err)
		} else {
			for _, n := range sh.ns.list {
				if n.name == name {
					d, owner = n, "the owner of "+agent
				}
			}
		}
	}
	res.handoffs++
	logf("handoff %d: SIGTERM %s, %s, %s", res.handoffs, d.name, owner, when)
	d.terminate()
	sleep(ctx, time.Duration(sh.rng.IntN(300))*time.Millisecond)
	n := sh.l.resendInFlight(ctx, sh.pool, d.url(), handoffResendTimeout)
	if err := d.waitExit(30 * time.Second); err != nil {
		// An orderly stop hands off every partition and exits 0.
		res.shapeProblems = append(res.shapeProblems, fmt.Sprintf("handoff %d: %v", res.handoffs, err))
	}
	down := time.Duration(sh.rng.Int64N(int64(sh.ttl)))
	logf("handoff %d: %s stopped, %d chats in flight resent to other nodes; down for %s", res.handoffs, d.name, n, down.Round(time.Millisecond))
	sleep(ctx, down)
	took, err := d.start(ctx)
	if err != nil {
		return fmt.Errorf("restart after handoff %d: %w", res.handoffs, err)
	}
	n = sh.l.resendInFlight(ctx, sh.pool, "", handoffResendTimeout)
	logf("handoff %d: %s ready again in %s, %d chats in flight resent", res.handoffs, d.name, took.Round(time.Millisecond), n)
	return nil
}

// ownerOf returns the name of the node that holds the lease of agent's
// partition, as the cluster subject of the agent's account reports it.
func ownerOf(ctx context.Context, nc *nats.Conn, prefix, agent string) (string, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msg, err := nc.RequestWithContext(rctx, host.ClusterSubject(prefix), nil)
	if err != nil {
		return "", err
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
		return "", fmt.Errorf("%s %s", code, msg.Header.Get("Nats-Service-Error"))
	}
	var info agentd.ClusterInfo
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		return "", err
	}
	if info.Partitions <= 0 {
		return "", errors.New("the cluster reports no partitions")
	}
	p := ownership.PartitionOf(agent, info.Partitions)
	for _, l := range info.Leases {
		if l.Partition == p {
			return l.Node, nil
		}
	}
	return "", fmt.Errorf("partition %d has no lease", p)
}

// resendInFlight sends every chat command in flight (one with an
// identity, whose turn has not ended) again, each from its own goroutine,
// as a client whose reply is late sends it: over a connection of pool to
// another node than its client's and than avoid's (a node stopping), each
// attempt waiting up to timeout, again after a timeout, a 409, a 503 or a
// 504, up to resendAttempts times. Every reply is recorded: each must name the
// command's one turn (checkTurns). It returns how many it resends.
func (l *load) resendInFlight(ctx context.Context, pool []*nats.Conn, avoid string, timeout time.Duration) int {
	l.mu.Lock()
	flights := make([]*flight, 0, len(l.mu.flights))
	for _, agent := range sortedKeys(l.mu.flights) {
		flights = append(flights, l.mu.flights[agent])
	}
	l.mu.Unlock()
	for _, f := range flights {
		nc := pickConn(pool, avoid, f.via.nc.ConnectedUrl())
		l.resends.Go(func() { l.resend(ctx, nc, f, timeout) })
	}
	return len(flights)
}

// inFlight returns the agent of a random chat command in flight, "" when
// none is.
func (l *load) inFlight(rng *rand.Rand) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	agents := sortedKeys(l.mu.flights)
	if len(agents) == 0 {
		return ""
	}
	return agents[rng.IntN(len(agents))]
}

// pickConn returns a connection of pool connected to neither avoid nor
// other, else one not connected to avoid, else the first.
func pickConn(pool []*nats.Conn, avoid, other string) *nats.Conn {
	for _, nc := range pool {
		if u := nc.ConnectedUrl(); u != avoid && u != other && u != "" {
			return nc
		}
	}
	for _, nc := range pool {
		if u := nc.ConnectedUrl(); u != avoid && u != "" {
			return nc
		}
	}
	return pool[0]
}

// resend sends f's command over nc until it is acknowledged, and records
// the reply.
func (l *load) resend(ctx context.Context, nc *nats.Conn, f *flight, timeout time.Duration) {
	l.count("chat resends")
	for range resendAttempts {
		if ctx.Err() != nil {
			return
		}
		var reply chathost.Reply
		l.sent(f.agent, f.idx)
		code, err := send(ctx, nc, timeout, f.agent, "chat", f.key, f.cmd, &reply)
		switch {
		case err == nil:
			l.count("chat resends answered")
			l.recordAck(f.agent, f.idx, reply)
			return
		case code == "":
			l.count("chat resend attempts lost")
		case code == "409" || code == "503" || code == "504":
			l.count("chat resend attempts " + code)
		default:
			// A sentence a client reads; not a broken invariant by
			// itself, counted by code.
			l.count("chat resends refused " + code)
			return
		}
		sleep(ctx, 200*time.Millisecond)
	}
}
