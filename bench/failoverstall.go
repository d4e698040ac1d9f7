package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/forever-agents/forever/eventlog"
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

// stallMonitor records when each load agent's events were stored, from
// ordered consumers on the agents' events streams (the stream leader's
// timestamps, so the reader's own delays do not count).
type stallMonitor struct {
	agents []string
	ls     eventlog.LogStreams

	mu    sync.Mutex
	times map[string][]time.Time

	wg   sync.WaitGroup
	stop context.CancelFunc
}

// startStallLoad starts a long steps fiber on each of n load agents and a
// monitor of their events through nc.
func startStallLoad(ctx context.Context, nc *nats.Conn, n int) (*stallMonitor, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ls, err := eventlog.ReadStreams(ctx, js)
	if err != nil {
		return nil, fmt.Errorf("bench: the log's streams: %w", err)
	}
	m := &stallMonitor{ls: ls, times: map[string][]time.Time{}}
	byStream := map[string][]string{}
	for i := range n {
		a := loadAgentName(i)
		m.agents = append(m.agents, a)
		byStream[ls.EventsOf(a)] = append(byStream[ls.EventsOf(a)], ls.EventsSubject(eventlog.DefaultPrefix, a))
	}
	mctx, cancel := context.WithCancel(context.Background())
	m.stop = cancel
	for stream, subjects := range byStream {
		cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
			FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverNewPolicy,
		})
		if err != nil {
			m.close()
			return nil, fmt.Errorf("bench: follow the load on %s: %w", stream, err)
		}
		msgs, err := cons.Messages()
		if err != nil {
			m.close()
			return nil, fmt.Errorf("bench: follow the load on %s: %w", stream, err)
		}
		context.AfterFunc(mctx, msgs.Stop)
		m.wg.Go(func() { m.read(mctx, msgs) })
	}
	start := fmt.Appendf(nil, `{"steps":%d,"delayMs":%d,"effect":"none"}`, failoverLoadSteps, failoverLoadDelayMS)
	for _, a := range m.agents {
		if _, err := agentCommand(ctx, nc, a, "start", start); err != nil {
			m.close()
			return nil, err
		}
	}
	return m, nil
}

// read records the stored time of every message until ctx ends.
func (m *stallMonitor) read(ctx context.Context, msgs jetstream.MessagesContext) {
	for ctx.Err() == nil {
		msg, err := msgs.Next(jetstream.NextContext(ctx))
		if err != nil {
			continue // the ordered consumer recreates itself; Stop ends it
		}
		md, err := msg.Metadata()
		if err != nil {
			continue
		}
		sub := msg.Subject()
		agent := sub[strings.LastIndexByte(sub, '.')+1:]
		m.mu.Lock()
		m.times[agent] = append(m.times[agent], md.Timestamp)
		m.mu.Unlock()
	}
}

func (m *stallMonitor) close() {
	m.stop()
	m.wg.Wait()
}

// loadShare is which load agents a kill's victim held: owned, or in a
// shard whose events stream it led.
type loadShare struct {
	victim  map[string]bool
	owned   int // of them owned by the victim
	ledShrd int // shards (events streams) the victim led
	shards  int
}

// shareOf asks each load agent's owner and each events stream's leader,
// just before victim is killed.
func (m *stallMonitor) shareOf(ctx context.Context, nc *nats.Conn, victim string) (loadShare, error) {
	s := loadShare{victim: map[string]bool{}, shards: len(m.ls.Events)}
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
	for {
		all := true
		m.mu.Lock()
		for _, a := range m.agents {
			ts := m.times[a]
			if len(ts) == 0 || !ts[len(ts)-1].After(killed) {
				all = false
				break
			}
		}
		m.mu.Unlock()
		if all || time.Now().After(deadline) {
			break
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return sleepCtx(ctx, failoverObserve)
}

// killStalls is what one kill did to the load agents.
type killStalls struct {
	share loadShare
	// victims and others count the agents writing when the kill came;
	// the stalled ones went more than failoverStall without an event.
	victims, others               int
	victimsStalled, othersStalled int
	worstOther                    time.Duration
	worstOtherAgent               string
	// slowestResume is the longest kill to first event of a victim's
	// agent; unresumed counts those without one by the end.
	slowestResume time.Duration
	unresumed     int
}

// stalls measures each load agent from the kill until end: its longest gap
// between stored events (the first gap from its last event before the
// kill, the last up to end), and for the victim's, the kill to its first
// event.
func (m *stallMonitor) stalls(share loadShare, killed, end time.Time) killStalls {
	ks := killStalls{share: share}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, a := range m.agents {
		ts := slices.Clone(m.times[a])
		slices.SortFunc(ts, time.Time.Compare)
		i, _ := slices.BinarySearchFunc(ts, killed, time.Time.Compare)
		if i == 0 || killed.Sub(ts[i-1]) > failoverActive {
			continue // not writing when the kill came
		}
		prev, worst := ts[i-1], time.Duration(0)
		resumed := time.Duration(-1)
		for _, t := range ts[i:] {
			if t.After(end) {
				break
			}
			if resumed < 0 {
				resumed = t.Sub(killed)
			}
			worst = max(worst, t.Sub(prev))
			prev = t
		}
		worst = max(worst, end.Sub(prev))
		stalled := worst > failoverStall
		if share.victim[a] {
			ks.victims++
			if stalled {
				ks.victimsStalled++
			}
			if resumed < 0 {
				ks.unresumed++
				resumed = end.Sub(killed)
			}
			ks.slowestResume = max(ks.slowestResume, resumed)
			continue
		}
		ks.others++
		if stalled {
			ks.othersStalled++
		}
		if worst > ks.worstOther {
			ks.worstOther, ks.worstOtherAgent = worst, a
		}
	}
	return ks
}

// stallRows are the rows of every kill, and over all kills.
func stallRows(kills []killStalls, victims []string, bound time.Duration, boundNote string) []Row {
	var rows []Row
	var vs, vn, ost, otn int
	var worstOther, slowest time.Duration
	for i, k := range kills {
		vs, vn, ost, otn = vs+k.victimsStalled, vn+k.victims, ost+k.othersStalled, otn+k.others
		worstOther, slowest = max(worstOther, k.worstOther), max(slowest, k.slowestResume)
		led := fmt.Sprintf("owned %d of the agents, led %d of %d shards", k.share.owned, k.share.ledShrd, k.share.shards)
		rows = append(rows, Row{
			Figure: fmt.Sprintf("kill %d (%s: %s): others' longest stall ms; stalled > 1 s: others %s, victim's %s",
				i+1, victims[i], led, frac(k.othersStalled, k.others), frac(k.victimsStalled, k.victims)),
			Value: max(1, millis(k.worstOther)), Baseline: "goal, ms", BaselineValue: millis(failoverStall), LowerIsBetter: true,
			Target: 1, TargetNote: "others never stall > 1 s",
		}, Row{
			Figure: fmt.Sprintf("kill %d: victim's agents, slowest kill to first event ms (%d not resumed)", i+1, k.unresumed),
			Value:  max(1, millis(k.slowestResume)), Baseline: boundNote, BaselineValue: millis(bound), LowerIsBetter: true,
			Target: 1, TargetNote: "victim's resume within election + TTL",
		})
	}
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
