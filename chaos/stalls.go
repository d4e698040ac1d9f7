package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/forever-agents/forever/agentd/demo"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/stalls"
	"github.com/forever-agents/forever/ownership"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stall watch (-stall-agents N): issue 36's "failover bounded to the
// victim's share". N steps agents write without pause: each starts a
// steps fiber of stallFiberSteps every stallFiberEvery, so about four
// overlap and a start lost to a kill (its request waits the load's
// timeout, 15 s in a cluster) leaves the agent writing; with two
// overlapping, such a loss let the agent go idle, and its last events
// then measured as a stall. Their events are read from the streams every
// stallReadEvery (record); before each kill the watch
// notes which of them the victim held (owned, or in an events shard it
// led), and afterwards measures each agent from the kill until
// stallSettle after the victim was ready again (settled): its longest
// time without a stored event, and
// for the victim's, the kill to its first event. The table prints the
// fraction that stalled more than stallLimit, split into the victim's and
// the others', and whether the victim's resumed within nats-server's
// election plus the lease TTL. Stalls are figures, not violations.
const (
	stallFiberSteps   = 600
	stallFiberDelayMS = 400
	stallFiberEvery   = 30 * time.Second
	stallLimit        = time.Second
	// stallElection is nats-server's election when a stream leader dies
	// (4-9 s, fixed in 2.15.2).
	stallElection = 9 * time.Second
	// stallActive: an agent without an event within it before the kill
	// was not writing and is not counted.
	stallActive = 2 * time.Second
	// stallSettle: the others are measured until this long after the
	// victim is ready again (or the next kill or SIGSTOP, if sooner), so
	// that the partitions handed to the returned node, and their agents'
	// pause, are in the measure.
	stallSettle = 3 * time.Second
)

// leasesStream is the lease bucket's stream.
const leasesStream = "KV_" + ownership.DefaultBucket

// stallWatch remembers the kills and measures each from the stall
// agents' events that record read: every stallReadEvery, each stream
// through a consumer kept between reads (stalls.Tail), each read ending
// at what the stream's leader held when it began. A read that fails (its
// stream electing) drops its consumer, and the next makes a new one from
// after the last event read.
type stallWatch struct {
	agents   []string
	ls       eventlog.LogStreams
	nc       *nats.Conn
	js       jetstream.JetStream
	ttl      time.Duration
	byStream map[string][]string // each stream's stall agents' subjects
	rec      *stampLog           // their events read so far (record)
	stop     func()              // ends record and closes trace
	recorded chan struct{}       // closed when record ended
	trace    *os.File            // a line for each read (traceRead)
	traceMu  sync.Mutex          // one line at a time
	leaders  *leaderLog          // the streams' elections; nil when not seen
	leases   *leaseLog           // the partitions' lease writes; nil when not seen
	// partitions is the cluster's partition count (ownership.ReadLayout),
	// 0 when unknown: leases then go unused.
	partitions int

	reads     sync.WaitGroup // each kill's read (done)
	mu        sync.Mutex
	results   []stallResult
	disrupted []time.Time // when each kill and SIGSTOP came (disrupting)
}

// stallKill is one kill as the watch saw it.
type stallKill struct {
	n                int
	victim           string
	killed, ready    time.Time
	held             map[string]bool
	led              map[string]bool // the events streams the victim led
	owned, ledShards int
	// movedShards of ledShards were the victim's by the leader
	// advisories only: their leader moved to it after it was asked.
	movedShards int
	// movedLeases of owned were the victim's by the lease bucket only:
	// their partition moved to it after its owner was asked.
	movedLeases int
	shards      int
	ledLeases   bool // the victim led the lease bucket's stream
}

// newStallWatch prepares n stall agents read through nc (the checker's
// connection; prefix is its log's subject prefix), and starts their
// reads, each traced to a line of tracePath (kept with the data dir).
func newStallWatch(ctx context.Context, nc *nats.Conn, prefix string, n int, ttl time.Duration, tracePath string) (*stallWatch, error) {
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
	w.rec = newStampLog(slices.Collect(maps.Keys(w.byStream)))
	if w.trace, err = os.Create(tracePath); err != nil {
		return nil, err
	}
	// Without the advisories, the leaders asked before each kill count.
	leaders, sub, err := followLeaders(nc)
	if err == nil {
		w.leaders = leaders
	}
	rctx, stop := context.WithCancel(ctx)
	w.stop = func() {
		stop()
		<-w.recorded
		w.trace.Close()
		if sub != nil {
			sub.Unsubscribe()
		}
	}
	// Without the lease bucket's watch, the owners asked before each
	// kill count.
	if layout, err := ownership.ReadLayout(ctx, js); err == nil && layout.Partitions > 0 {
		if leases, err := followLeases(rctx, js); err == nil {
			w.leases, w.partitions = leases, layout.Partitions
		}
	}
	w.recorded = make(chan struct{})
	go func() { defer close(w.recorded); w.record(rctx) }()
	return w, nil
}

// run keeps agent writing: a steps fiber every stallFiberEvery, each
// acknowledged fiber checked by verify like the steps load's.
func (w *stallWatch) run(ctx context.Context, l *load, c *client, agent string) {
	for ctx.Err() == nil {
		body := demo.StepsStart{Steps: stallFiberSteps, DelayMS: stallFiberDelayMS, Effect: demo.StepEffectNone}
		var reply struct{ Fiber string }
		if code, err := send(ctx, c.nc, l.requestTimeout, agent, "start", "", body, &reply); code != "" {
			l.count("stall starts refused " + code)
		} else if err != nil || reply.Fiber == "" {
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
	led := map[string]bool{}
	k := stallKill{n: n, victim: victim, held: map[string]bool{}, led: led, shards: len(w.ls.Events)}
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
	if s, err := w.js.Stream(ictx, leasesStream); err == nil && s.CachedInfo().Cluster != nil {
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

// disrupting notes that a kill or a SIGSTOP comes now: the measure of
// an earlier kill ends there.
func (w *stallWatch) disrupting() {
	w.mu.Lock()
	w.disrupted = append(w.disrupted, time.Now())
	w.mu.Unlock()
}

// settled is when the others' measure of k ends: stallSettle after its
// victim was ready again, or the first kill or SIGSTOP after k before
// that.
func (w *stallWatch) settled(k stallKill) time.Time {
	end := k.ready.Add(stallSettle)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.disrupted {
		if t.After(k.killed) && t.Before(end) {
			end = t
		}
	}
	return end
}

// done measures kill k in the background, from the stall agents' events
// read so far (record), twice: the others' once their measure ended
// (settled), the victim's once they had the election and the TTL to
// resume, if that is later.
func (w *stallWatch) done(ctx context.Context, k stallKill) {
	w.reads.Go(func() {
		others := k.ready.Add(stallSettle + 500*time.Millisecond)
		victims := k.killed.Add(stallElection + w.ttl + time.Second)
		r := w.readAt(ctx, k, others)
		if r.err == nil && victims.After(others) {
			late := w.readAt(ctx, k, victims)
			r.err = late.err
			r.Victims, r.VictimsStalled, r.SlowestResume, r.Unresumed = late.Victims, late.VictimsStalled, late.SlowestResume, late.Unresumed
		}
		if ctx.Err() != nil {
			return
		}
		w.mu.Lock()
		w.results = append(w.results, r)
		w.mu.Unlock()
	})
}

// readAt waits until the stall agents' events are read past at, and
// measures k from those stored from just before k on, leaving out the
// agents a compaction purged events of unread since then.
func (w *stallWatch) readAt(ctx context.Context, k stallKill, at time.Time) stallResult {
	if err := w.rec.waitPast(ctx, at, time.Until(at)+stallReadWait); err != nil {
		return stallResult{k: k, err: err}
	}
	k = w.withLeasesAt(w.withLeadersAt(k))
	from := k.killed.Add(-stallActive)
	var agents, unread []string
	for _, a := range w.agents {
		if w.rec.unreadIn(a, from, at) {
			unread = append(unread, a)
		} else {
			agents = append(agents, a)
		}
	}
	r := measureKill(agents, w.rec.since(from), k, w.settled(k))
	r.unread, r.agents = len(unread), len(w.agents)
	if r.OthersStalled > 0 && w.leaders != nil {
		stream := w.ls.EventsOf(r.WorstOtherAgent)
		r.gapLeaders = w.leaders.around(stream, k.killed, r.WorstOtherGap.Before.At, r.WorstOtherGap.After.At)
	}
	return r
}

// stallResult is one kill's measure, or why it has none (err: its
// events could not be read).
type stallResult struct {
	k   stallKill
	end time.Time // where the measure ended (settled)
	// read counts the agents (of agents) with any event read from
	// stallActive before the kill on; those measured had one before the
	// kill, the rest none within stallActive before it. unread counts the
	// agents left out: a compaction purged events of theirs from then on
	// before a read saw them.
	read, agents, unread int
	stalls.Result
	// gapLeaders says who led the stream of the others' worst stall at
	// the kill, and its elections around the stall (leaderLog.around).
	gapLeaders string
	err        error
}

// measure waits for every kill's measure (done), ends the reads, and
// returns the measures in the kills' order.
func (w *stallWatch) measure() []stallResult {
	w.reads.Wait()
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	slices.SortFunc(w.results, func(a, b stallResult) int { return a.k.n - b.k.n })
	return w.results
}

// measureKill measures each agent writing when k came (an event within
// stallActive before it), by its stored events, from the kill until end
// (settled): its longest time without an event, and for the victim's
// (held just before the kill, or last written by the victim before it),
// the kill to its first event (even past end).
func measureKill(agents []string, stamps map[string][]stalls.Stamp, k stallKill, end time.Time) stallResult {
	read := 0
	for _, a := range agents {
		if len(stamps[a]) > 0 {
			read++
		}
	}
	return stallResult{k: k, end: end, read: read, agents: len(agents), Result: stalls.Measure(agents, stamps, stalls.Kill{
		Killed: k.killed, End: end, Victim: k.held, VictimNode: k.victim, Active: stallActive, Limit: stallLimit, ResumeAfterEnd: true,
	})}
}

// printStalls prints the watch's summary and the kills where an agent
// outside the victim's share stalled, or the victim's did not resume in
// time.
func printStalls(wr io.Writer, all []stallResult, ttl time.Duration) {
	bound := stallElection + ttl
	var rs []stallResult
	for _, r := range all {
		if r.err != nil {
			fmt.Fprintf(wr, "stall: kill %d (%s) not measured: %v\n", r.k.n, r.k.victim, r.err)
			continue
		}
		rs = append(rs, r)
	}
	var vs, vn, ost, otn, missOthers, missVictims, read, possible, unread, moved, movedLeases int
	var worstOther, slowest time.Duration
	for _, r := range rs {
		vs, vn, ost, otn = vs+r.VictimsStalled, vn+r.Victims, ost+r.OthersStalled, otn+r.Others
		read, possible, unread = read+r.read, possible+r.agents, unread+r.unread
		if r.k.movedShards > 0 {
			moved++
		}
		if r.k.movedLeases > 0 {
			movedLeases++
		}
		worstOther, slowest = max(worstOther, r.WorstOther), max(slowest, r.SlowestResume)
		if r.OthersStalled > 0 {
			missOthers++
		}
		if r.SlowestResume > bound || r.Unresumed > 0 {
			missVictims++
		}
	}
	verdict := func(miss int) string {
		if miss == 0 {
			return "PASS"
		}
		return fmt.Sprintf("MISS in %d kills", miss)
	}
	fmt.Fprintf(wr, "stalls: measured %d agent-kills of %d (an event within %s before the kill); %d had events from then on; %d left out, a compaction having purged events of theirs unread\n",
		vn+otn, possible, stallActive, read, unread)
	fmt.Fprintf(wr, "stalls: in %d kills a shard's leader moved to the victim after it was asked (the leader advisories): its agents counted as the victim's\n", moved)
	fmt.Fprintf(wr, "stalls: in %d kills an agent's partition moved to the victim after its owner was asked (the lease bucket's watch): counted as the victim's\n", movedLeases)
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
			nlStalled, nlOthers = nlStalled+r.OthersStalled, nlOthers+r.Others
			nlWorst = max(nlWorst, r.WorstOther)
		}
	}
	fmt.Fprintf(wr, "stalls over the %d kills whose victim did not lead the lease bucket: others %s (longest %s)\n", nl, frac(nlStalled, nlOthers), nlWorst.Round(time.Millisecond))
	for _, r := range rs {
		if r.OthersStalled == 0 && r.SlowestResume <= bound && r.Unresumed == 0 {
			continue
		}
		fmt.Fprintf(wr, "stall: kill %d (%s, owned %d (%d moved to it after it was asked), led %d of %d shards (%d moved to it after it was asked), led the lease bucket %t, killed %s, ready %s, measured to %s): others %s stalled (longest %s%s), victim's %s (slowest resume %s, %d not resumed)\n",
			r.k.n, r.k.victim, r.k.owned, r.k.movedLeases, r.k.ledShards, r.k.shards, r.k.movedShards, r.k.ledLeases, r.k.killed.Format(clock), r.k.ready.Format(clock), r.end.Format(clock),
			frac(r.OthersStalled, r.Others), r.WorstOther.Round(time.Millisecond), gapText(r), frac(r.VictimsStalled, r.Victims),
			r.SlowestResume.Round(time.Millisecond), r.Unresumed)
	}
}

const clock = "15:04:05.000"

// gapText names where the others' longest stall was: its agent, and the
// events around it with their writers (another writer after it: the
// agent moved).
func gapText(r stallResult) string {
	if r.OthersStalled == 0 {
		return ""
	}
	g := r.WorstOtherGap
	after := "none to the end"
	if !g.After.At.IsZero() {
		after = g.After.At.Format(clock) + " by " + g.After.Node
	}
	leaders := ""
	if r.gapLeaders != "" {
		leaders = "; " + r.gapLeaders
	}
	return fmt.Sprintf(", %s: from %s by %s to %s%s", r.WorstOtherAgent, g.Before.At.Format(clock), g.Before.Node, after, leaders)
}

// frac prints n of d as "n/d (p%)".
func frac(n, d int) string {
	if d == 0 {
		return "0/0"
	}
	return fmt.Sprintf("%d/%d (%.0f%%)", n, d, 100*float64(n)/float64(d))
}
