package main

import (
	"context"
	"fmt"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/stalls"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Failover load parameters: the agents that write through every kill, whose
// stalls say whether a failover is bounded to the victim's share.
const (
	// failoverLoadAgents steps agents each run one long steps fiber for the
	// whole scenario, a step (one synced write) every failoverLoadDelayMS.
	failoverLoadAgents  = 30
	failoverLoadDelayMS = 250
	failoverLoadSteps   = 100_000
	// failoverStall is a stall: an agent without a stored event for longer.
	// The goal is that agents neither owned by the victim nor in a shard it
	// led never stall.
	failoverStall = time.Second
	// failoverElection is nats-server's election when a stream's leader
	// dies (4-9 s, fixed in 2.15.2: docs/benchmarks.md): the victim's
	// agents must resume within it plus the lease TTL.
	failoverElection = 9 * time.Second
	// failoverObserve is how long the others are watched for once every
	// load agent wrote again after a kill.
	failoverObserve = 3 * time.Second
	// failoverActive: an agent that stored no event within it before the
	// kill was not writing (its fiber between owners) and is not counted.
	failoverActive = 2 * time.Second
)

// loadAgentName is the i-th failover load agent.
func loadAgentName(i int) string { return fmt.Sprintf("steps:failover-load-%d", i) }

// stallMonitor reads when each load agent's events were stored (the
// stream leader's timestamps, so the reader's own delays do not count)
// from the agents' events streams, after the fact: a live ordered consumer
// may hang recreating itself when its server dies, which would look like a
// stall.
type stallMonitor struct {
	agents   []string
	ls       eventlog.LogStreams
	js       jetstream.JetStream
	byStream map[string][]string // each stream's load agents' subjects
}

// startStallLoad starts a long steps fiber on each of n load agents.
func startStallLoad(ctx context.Context, nc *nats.Conn, n int) (*stallMonitor, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ls, err := eventlog.ReadStreams(ctx, js)
	if err != nil {
		return nil, fmt.Errorf("bench: the log's streams: %w", err)
	}
	m := &stallMonitor{ls: ls, js: js, byStream: map[string][]string{}}
	for i := range n {
		a := loadAgentName(i)
		m.agents = append(m.agents, a)
		m.byStream[ls.EventsOf(a)] = append(m.byStream[ls.EventsOf(a)], ls.EventsSubject(eventlog.DefaultPrefix, a))
	}
	start := fmt.Appendf(nil, `{"steps":%d,"delayMs":%d,"effect":"none"}`, failoverLoadSteps, failoverLoadDelayMS)
	for _, a := range m.agents {
		if _, err := agentCommand(ctx, nc, a, "start", start); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// stored returns the stamps (stored time, writer) of each load agent's
// events from from on, up to about to (a little past it). A stream
// without a leader yet (the victim led it) fails the read: it is tried
// again, a few times.
func (m *stallMonitor) stored(ctx context.Context, from, to time.Time) (map[string][]stalls.Stamp, error) {
	stamps, err := stalls.Stored(ctx, m.js, m.byStream, from, to)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return stamps, nil
}

// loadShare is which load agents a kill's victim held: owned, or in a
// shard whose events stream it led.
type loadShare struct {
	node    string // the victim
	victim  map[string]bool
	owned   int // of them owned by the victim
	ledShrd int // shards (events streams) the victim led
	shards  int
}

// shareOf asks each load agent's owner and each events stream's leader,
// just before victim is killed.
func (m *stallMonitor) shareOf(ctx context.Context, nc *nats.Conn, victim string) (loadShare, error) {
	s := loadShare{node: victim, victim: map[string]bool{}, shards: len(m.ls.Events)}
	led := map[string]bool{}
	for _, stream := range m.ls.Events {
		if streamLeader(ctx, nc, stream) == victim {
			led[stream] = true
			s.ledShrd++
		}
	}
	sctx, cancel := context.WithTimeout(ctx, failoverWriting)
	defer cancel()
	for _, a := range m.agents {
		st, err := agentStatus(sctx, nc, a)
		if err != nil {
			return s, err
		}
		if st.Owner == victim {
			s.owned++
			s.victim[a] = true
		} else if led[m.ls.EventsOf(a)] {
			s.victim[a] = true
		}
	}
	return s, nil
}

// waitResumed waits until every load agent stored an event after killed,
// then failoverObserve more, or until the deadline.
func (m *stallMonitor) waitResumed(ctx context.Context, killed, deadline time.Time) error {
	for time.Now().Before(deadline) {
		times, err := m.stored(ctx, killed, time.Now())
		if err != nil {
			return err
		}
		all := true
		for _, a := range m.agents {
			if len(times[a]) == 0 {
				all = false
				break
			}
		}
		if all {
			break
		}
		if err := sleepCtx(ctx, time.Second); err != nil {
			return err
		}
	}
	return sleepCtx(ctx, failoverObserve)
}

// killStalls is what one kill did to the load agents: the agents writing
// when it came, the stalled ones went more than failoverStall without an
// event (stalls.Result).
type killStalls struct {
	share     loadShare
	ledLeases bool // the victim led the lease bucket's stream
	stalls.Result
}

// stalls reads what the load agents stored from before the kill, and
// measures each from the kill until end: its longest gap
// between stored events (the first gap from its last event before the
// kill, the last up to end), and for the victim's, the kill to its first
// event.
func (m *stallMonitor) stalls(ctx context.Context, share loadShare, killed, end time.Time) (killStalls, error) {
	times, err := m.stored(ctx, killed.Add(-failoverActive), end)
	if err != nil {
		return killStalls{share: share}, err
	}
	return measureStalls(m.agents, times, share, killed, end), nil
}

// measureStalls measures agents by the stored times of their events, as
// stallMonitor.stalls describes.
func measureStalls(agents []string, stamps map[string][]stalls.Stamp, share loadShare, killed, end time.Time) killStalls {
	return killStalls{share: share, Result: stalls.Measure(agents, stamps, stalls.Kill{
		Killed: killed, End: end, Victim: share.victim, VictimNode: share.node, Active: failoverActive, Limit: failoverStall,
	})}
}

// stallRows are the rows of every kill, and over all kills.
func stallRows(kills []killStalls, victims []string, bound time.Duration, boundNote string) []Row {
	var rows []Row
	var vs, vn, ost, otn int
	var worstOther, slowest time.Duration
	for i, k := range kills {
		vs, vn, ost, otn = vs+k.VictimsStalled, vn+k.Victims, ost+k.OthersStalled, otn+k.Others
		worstOther, slowest = max(worstOther, k.WorstOther), max(slowest, k.SlowestResume)
		led := fmt.Sprintf("owned %d of the agents, led %d of %d shards", k.share.owned, k.share.ledShrd, k.share.shards)
		if k.ledLeases {
			led += " and the lease bucket"
		}
		rows = append(rows, Row{
			Figure: fmt.Sprintf("kill %d (%s: %s): others' longest stall ms; stalled > 1 s: others %s, victim's %s",
				i+1, victims[i], led, frac(k.OthersStalled, k.Others), frac(k.VictimsStalled, k.Victims)),
			Value: max(1, millis(k.WorstOther)), Baseline: "goal, ms", BaselineValue: millis(failoverStall), LowerIsBetter: true,
			Target: 1, TargetNote: "others never stall > 1 s",
		}, Row{
			Figure: fmt.Sprintf("kill %d: victim's agents, slowest kill to first event ms (%d not resumed)", i+1, k.Unresumed),
			Value:  max(1, millis(k.SlowestResume)), Baseline: boundNote, BaselineValue: millis(bound), LowerIsBetter: true,
			Target: 1, TargetNote: "victim's resume within election + TTL",
		})
	}
	// The lease bucket is one Raft group every node renews through: the
	// kills whose victim did not lead it, apart.
	var nl, nlStalled, nlOthers int
	var nlWorst time.Duration
	for _, k := range kills {
		if !k.ledLeases {
			nl++
			nlStalled, nlOthers = nlStalled+k.OthersStalled, nlOthers+k.Others
			nlWorst = max(nlWorst, k.WorstOther)
		}
	}
	rows = append(rows, Row{
		Figure: fmt.Sprintf("the %d kills whose victim did not lead the lease bucket: others' longest stall ms; others stalled > 1 s %s", nl, frac(nlStalled, nlOthers)),
		Value:  max(1, millis(nlWorst)), Baseline: "goal, ms", BaselineValue: millis(failoverStall), LowerIsBetter: true,
		Target: 1, TargetNote: "others never stall > 1 s",
	})
	rows = append(rows, Row{
		Figure: fmt.Sprintf("all %d kills: others' longest stall ms; stalled > 1 s: others %s, victim's %s", len(kills), frac(ost, otn), frac(vs, vn)),
		Value:  max(1, millis(worstOther)), Baseline: "goal, ms", BaselineValue: millis(failoverStall), LowerIsBetter: true,
		Target: 1, TargetNote: "others never stall > 1 s",
	}, Row{
		Figure: fmt.Sprintf("all %d kills: victim's agents, slowest kill to first event ms", len(kills)),
		Value:  max(1, millis(slowest)), Baseline: boundNote, BaselineValue: millis(bound), LowerIsBetter: true,
		Target: 1, TargetNote: "victim's resume within election + TTL",
	})
	return rows
}

// frac prints n of d as "n/d (p%)".
func frac(n, d int) string {
	if d == 0 {
		return "0/0"
	}
	return fmt.Sprintf("%d/%d (%.0f%%)", n, d, 100*float64(n)/float64(d))
}
