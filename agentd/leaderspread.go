package agentd

import (
	"context"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/nats-io/nats-server/v2/server"
)

// leaderSpreadEvery is how often the owner of partition 0 spreads the
// shard streams' leaders over the servers (eventlog.Log.SpreadLeaders).
const leaderSpreadEvery = 30 * time.Second

// A spread that is due waits while the partitions move (spreadGate):
// until they have stayed where the assignment wants them for spreadQuiet,
// checked every spreadPoll, and spreads anyway once it has waited
// spreadWaitMax, longer than a warm handoff waits on its receiver
// (ownership.DefaultWarmWait), so partitions that never settle (a node
// that cannot take its share) do not keep the leaders unspread.
const (
	spreadQuiet   = 3 * time.Second
	spreadPoll    = time.Second
	spreadWaitMax = 60 * time.Second
)

// addLeaderSpread adds, for a replicated sharded log, the component that
// keeps its streams' Raft leaders spread over the servers: the node that
// owns partition 0 checks every leaderSpreadEvery, so one node does it
// and another takes over with the lease, and a server that returned gets
// its share of leaders back at the next check once its partitions have
// moved back to it (spreadGate). With an embedded server (srv), a server
// it has no route to at the check is given no stream (routedTo).
func (d *Daemon) addLeaderSpread(lg *eventlog.Log, srv *server.Server) error {
	if lg.Shards() == 0 || lg.Replicas() < 2 || d.parts.mgr == nil {
		return nil
	}
	mgr := d.parts.mgr
	return d.Add("shard leaders", ComponentFunc(func(ctx context.Context) error {
		t := time.NewTicker(spreadPoll)
		defer t.Stop()
		gate := spreadGate{due: time.Now().Add(leaderSpreadEvery)}
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			_, _, owned := mgr.Owned(0)
			switch gate.next(time.Now(), owned, func() bool { return mgr.Settled(spreadQuiet) }) {
			case spreadWait:
				continue
			case spreadHeld:
				d.logger.Info("shard leaders' spread waits while partitions move", "quiet", spreadQuiet, "at most", spreadWaitMax)
				continue
			case spreadUnsettled:
				d.logger.Warn("shard leaders spread while partitions still move", "waited", spreadWaitMax)
			}
			if _, err := lg.SpreadLeaders(ctx, d.notLeaving(routedTo(srv))); err != nil && ctx.Err() == nil {
				d.logger.Warn("spreading the shard streams' leaders", "err", err)
			}
		}
	}))
}

// spreadStep is what the leader spread does at a poll.
type spreadStep int

const (
	spreadWait      spreadStep = iota // not due, not this node's, or still held
	spreadHeld                        // due, and held for the first time: partitions move
	spreadNow                         // due, partitions settled: spread
	spreadUnsettled                   // due and held spreadWaitMax: spread anyway
)

// spreadGate decides at each poll whether the leader spread runs: due
// every leaderSpreadEvery on the owner of partition 0, and then held
// while the partitions move, up to spreadWaitMax. A stepdown elects its
// stream's leader within about a second, and an agent whose partition
// moves in that second waits for both (1.23 s in a 6-node chaos run at
// stop 69, when a returning node took its partitions back as the spread
// gave it its leaders); partitions that settled for spreadQuiet move
// again only when a node joins, leaves or dies.
type spreadGate struct {
	due  time.Time // when the next spread is due
	held time.Time // when a due spread was first held; zero while none is
}

// next returns the step at now: owned is whether this node owns partition
// 0, settled (asked only when due) whether the partitions have settled.
func (g *spreadGate) next(now time.Time, owned bool, settled func() bool) spreadStep {
	switch {
	case now.Before(g.due):
		return spreadWait
	case !owned:
		g.due, g.held = now.Add(leaderSpreadEvery), time.Time{}
		return spreadWait
	case settled():
		g.due, g.held = now.Add(leaderSpreadEvery), time.Time{}
		return spreadNow
	case g.held.IsZero():
		g.held = now
		return spreadHeld
	case now.Sub(g.held) < spreadWaitMax:
		return spreadWait
	}
	g.due, g.held = now.Add(leaderSpreadEvery), time.Time{}
	return spreadUnsettled
}

// routeSettle is how long a route to a server must have been up for the
// leader spread to give that server streams. A server that restarted a
// moment ago routes again at once, and its stream replicas, which the
// leaders heard from a second before the kill, still look current; but
// its Raft groups are still being restored, and a stream handed to it
// stays without a leader for an election (5.4 s in a 6-node chaos run,
// the stepdown 0.5 s after the server started).
const routeSettle = 10 * time.Second

// routedTo returns whether srv routes to a server (srv itself included),
// read from its routes at each call, by a route up for routeSettle at
// least: nil without an embedded server. A SIGKILLed server's routes
// close with its process, at once, where the streams' leaders still
// count it live for seconds; its new process's routes are young.
func routedTo(srv *server.Server) func(name string) bool {
	return routedSince(srv, routeSettle)
}

// routedSince is routedTo with routes up for settle at least.
func routedSince(srv *server.Server, settle time.Duration) func(name string) bool {
	if srv == nil {
		return nil
	}
	return func(name string) bool {
		if name == srv.Name() {
			return true
		}
		rz, err := srv.Routez(nil)
		if err != nil {
			return false
		}
		for _, r := range rz.Routes {
			if r.RemoteName == name && time.Since(r.Start) >= settle {
				return true
			}
		}
		return false
	}
}
