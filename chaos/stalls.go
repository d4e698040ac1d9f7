package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/forever-agents/forever/agentd/demo"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/ownership"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stall watch (-stall-agents N): issue 36's "failover bounded to the
// victim's share". N steps agents write without pause (each starts a
// steps fiber of stallFiberSteps every stallFiberEvery, so two overlap),
// their events followed from the streams; before each kill the watch
// notes which of them the victim held (owned, or in an events shard it
// led), and afterwards measures each agent from the kill until the
// victim was ready again: its longest time without a stored event, and
// for the victim's, the kill to its first event. The table prints the
// fraction that stalled more than stallLimit, split into the victim's and
// the others', and whether the victim's resumed within nats-server's
// election plus the lease TTL. Stalls are figures, not violations.
const (
	stallFiberSteps   = 60
	stallFiberDelayMS = 200
	stallFiberEvery   = 8 * time.Second
	stallLimit        = time.Second
	// stallElection is nats-server's election when a stream leader dies
	// (4-9 s, fixed in 2.15.2).
	stallElection = 9 * time.Second
	// stallActive: an agent without an event within it before the kill
	// was not writing and is not counted.
	stallActive = 2 * time.Second
)

// stallWatch remembers the kills; after the run it reads the stall
// agents' events from their streams (a live ordered consumer may hang
// recreating itself when its server dies, which would look like a stall).
type stallWatch struct {
	agents   []string
	ls       eventlog.LogStreams
	nc       *nats.Conn
	js       jetstream.JetStream
	ttl      time.Duration
	byStream map[string][]string // each stream's stall agents' subjects

	mu    sync.Mutex
	kills []stallKill
}

// stallKill is one kill as the watch saw it.
type stallKill struct {
	n                int
	victim           string
	killed, ready    time.Time
	held             map[string]bool
	owned, ledShards int
	shards           int
	ledLeases        bool // the victim led the lease bucket's stream
}

// newStallWatch prepares n stall agents read through nc (the checker's
// connection; prefix is its log's subject prefix).
func newStallWatch(ctx context.Context, nc *nats.Conn, prefix string, n int, ttl time.Duration) (*stallWatch, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ls, err := eventlog.ReadStreams(ctx, js)
	if err != nil {
		return nil, err
	}
	w := &stallWatch{ls: ls, nc: nc, js: js, ttl: ttl, byStream: map[string][]string{}}
	for i := range n {
		a := fmt.Sprintf("steps:chaos-stall-%d", i)
		w.agents = append(w.agents, a)
		w.byStream[ls.EventsOf(a)] = append(w.byStream[ls.EventsOf(a)], ls.EventsSubject(prefix, a))
	}
	return w, nil
}

// stored reads the stored times of each stall agent's events from from
// on, trying again a few times when a stream answers an error.
func (w *stallWatch) stored(ctx context.Context, from time.Time) (map[string][]time.Time, error) {
	var err error
	for range 10 {
		out := map[string][]time.Time{}
		if err = w.storedOnce(ctx, from, out); err == nil {
			return out, nil
		}
		sleep(ctx, time.Second)
	}
	return nil, err
}

func (w *stallWatch) storedOnce(ctx context.Context, from time.Time, out map[string][]time.Time) error {
	for stream, subjects := range w.byStream {
		cons, err := w.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
			FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &from,
		})
		if err != nil {
			return fmt.Errorf("stall watch: %s: %w", stream, err)
		}
		for done := false; !done; {
			batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
			if err != nil {
				return fmt.Errorf("stall watch: %s: %w", stream, err)
			}
			n := 0
			for m := range batch.Messages() {
				n++
				md, err := m.Metadata()
				if err != nil {
					continue
				}
				sub := m.Subject()
				agent := sub[strings.LastIndexByte(sub, '.')+1:]
				out[agent] = append(out[agent], md.Timestamp)
				done = done || md.NumPending == 0
			}
			if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
				return fmt.Errorf("stall watch: %s: %w", stream, err)
			}
			done = done || n == 0
		}
	}
	return nil
}

// run keeps agent writing: a steps fiber every stallFiberEvery, each
// acknowledged fiber checked by verify like the steps load's.
func (w *stallWatch) run(ctx context.Context, l *load, c *client, agent string) {
	for ctx.Err() == nil {
		body := demo.StepsStart{Steps: stallFiberSteps, DelayMS: stallFiberDelayMS, Effect: demo.StepEffectNone}
		var reply struct{ Fiber string }
		if _, err := l.request(ctx, c, agent, "start", "", body, &reply); err != nil || reply.Fiber == "" {
			l.count("stall starts lost")
		} else {
			l.ack(agent, reply.Fiber)
			l.count("stall starts")
		}
		sleep(ctx, stallFiberEvery)
	}
}

// before notes which stall agents victim holds, just before its kill.
func (w *stallWatch) before(ctx context.Context, n int, victim string) stallKill {
	k := stallKill{n: n, victim: victim, held: map[string]bool{}, shards: len(w.ls.Events)}
	led := map[string]bool{}
	for _, stream := range w.ls.Events {
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := w.js.Stream(ictx, stream)
		cancel()
		if err == nil && s.CachedInfo().Cluster != nil && s.CachedInfo().Cluster.Leader == victim {
			led[stream] = true
			k.ledShards++
		}
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if s, err := w.js.Stream(ictx, "KV_"+ownership.DefaultBucket); err == nil && s.CachedInfo().Cluster != nil {
		k.ledLeases = s.CachedInfo().Cluster.Leader == victim
	}
	cancel()
	for _, a := range w.agents {
		var st struct{ Owner string }
		if _, err := send(ctx, w.nc, 5*time.Second, a, "status", "", nil, &st); err != nil {
			continue
		}
		if st.Owner == victim {
			k.owned++
			k.held[a] = true
		} else if led[w.ls.EventsOf(a)] {
			k.held[a] = true
		}
	}
	return k
}

// done records a kill once its victim is ready again.
func (w *stallWatch) done(k stallKill) {
	w.mu.Lock()
	w.kills = append(w.kills, k)
	w.mu.Unlock()
}

// stallResult is one kill's measure.
type stallResult struct {
	k                             stallKill
	victims, others               int
	victimsStalled, othersStalled int
	worstOther                    time.Duration
	slowestResume                 time.Duration
	unresumed                     int
}

// measure measures every kill: each agent writing when it came, from the
// kill until its victim was ready again (at least until the bound on the
// victim's agents' resumption).
func (w *stallWatch) measure(ctx context.Context) ([]stallResult, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.kills) == 0 {
		return nil, nil
	}
	times, err := w.stored(ctx, w.kills[0].killed.Add(-stallActive))
	if err != nil {
		return nil, err
	}
	for _, ts := range times {
		slices.SortFunc(ts, time.Time.Compare)
	}
	var out []stallResult
	for _, k := range w.kills {
		out = append(out, measureKill(w.agents, times, k))
	}
	return out, nil
}

// measureKill measures each agent writing when k came (an event within
// stallActive before it), by the sorted stored times of its events, from
// the kill until the victim was ready again: its longest time without an
// event, and for the victim's, the kill to its first event.
func measureKill(agents []string, times map[string][]time.Time, k stallKill) stallResult {
	r := stallResult{k: k}
	end := k.ready
	for _, a := range agents {
		ts := times[a]
		i, _ := slices.BinarySearchFunc(ts, k.killed, time.Time.Compare)
		if i == 0 || k.killed.Sub(ts[i-1]) > stallActive {
			continue
		}
		prev, worst := ts[i-1], time.Duration(0)
		for _, t := range ts[i:] {
			if t.After(end) {
				break
			}
			worst = max(worst, t.Sub(prev))
			prev = t
		}
		worst = max(worst, end.Sub(prev))
		resumed := time.Duration(-1)
		if i < len(ts) {
			resumed = ts[i].Sub(k.killed)
		}
		stalled := worst > stallLimit
		if k.held[a] {
			r.victims++
			if stalled {
				r.victimsStalled++
			}
			if resumed < 0 {
				r.unresumed++
				resumed = end.Sub(k.killed)
			}
			r.slowestResume = max(r.slowestResume, resumed)
			continue
		}
		r.others++
		if stalled {
			r.othersStalled++
		}
		r.worstOther = max(r.worstOther, worst)
	}
	return r
}

// printStalls prints the watch's summary and the kills where an agent
// outside the victim's share stalled, or the victim's did not resume in
// time.
func printStalls(wr io.Writer, rs []stallResult, ttl time.Duration) {
	bound := stallElection + ttl
	var vs, vn, ost, otn, missOthers, missVictims int
	var worstOther, slowest time.Duration
	for _, r := range rs {
		vs, vn, ost, otn = vs+r.victimsStalled, vn+r.victims, ost+r.othersStalled, otn+r.others
		worstOther, slowest = max(worstOther, r.worstOther), max(slowest, r.slowestResume)
		if r.othersStalled > 0 {
			missOthers++
		}
		if r.slowestResume > bound || r.unresumed > 0 {
			missVictims++
		}
	}
	verdict := func(miss int) string {
		if miss == 0 {
			return "PASS"
		}
		return fmt.Sprintf("MISS in %d kills", miss)
	}
	fmt.Fprintf(wr, "stalls over %d kills: agents stalled > %s: others %s (longest %s), %s; victim's %s, slowest resume %s within election %s + TTL %s: %s\n",
		len(rs), stallLimit, frac(ost, otn), worstOther.Round(time.Millisecond), verdict(missOthers),
		frac(vs, vn), slowest.Round(time.Millisecond), stallElection, ttl, verdict(missVictims))
	// The lease bucket is one Raft group every node renews through: a
	// victim that led it may stall everyone, which the shards do not
	// spread.
	var nl, nlStalled, nlOthers int
	var nlWorst time.Duration
	for _, r := range rs {
		if !r.k.ledLeases {
			nl++
			nlStalled, nlOthers = nlStalled+r.othersStalled, nlOthers+r.others
			nlWorst = max(nlWorst, r.worstOther)
		}
	}
	fmt.Fprintf(wr, "stalls over the %d kills whose victim did not lead the lease bucket: others %s (longest %s)\n", nl, frac(nlStalled, nlOthers), nlWorst.Round(time.Millisecond))
	for _, r := range rs {
		if r.othersStalled == 0 && r.slowestResume <= bound && r.unresumed == 0 {
			continue
		}
		fmt.Fprintf(wr, "stall: kill %d (%s, owned %d, led %d of %d shards, led the lease bucket %t, killed %s): others %s stalled (longest %s), victim's %s (slowest resume %s, %d not resumed)\n",
			r.k.n, r.k.victim, r.k.owned, r.k.ledShards, r.k.shards, r.k.ledLeases, r.k.killed.Format("15:04:05.000"),
			frac(r.othersStalled, r.others), r.worstOther.Round(time.Millisecond), frac(r.victimsStalled, r.victims),
			r.slowestResume.Round(time.Millisecond), r.unresumed)
	}
}

// frac prints n of d as "n/d (p%)".
func frac(n, d int) string {
	if d == 0 {
		return "0/0"
	}
	return fmt.Sprintf("%d/%d (%.0f%%)", n, d, 100*float64(n)/float64(d))
}
