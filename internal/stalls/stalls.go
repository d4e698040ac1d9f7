package stalls

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/leaderread"
)

// Stamp is one stored event of an agent: when the stream stored it, and
// the node that wrote it (its writer token's, eventlog.WriterOf; "" when
// it has none).
type Stamp struct {
	At   time.Time
	Node string
	// Seq is the event's sequence in its stream. Covers, for a part of a
	// snapshot (eventlog.TypeSnapshot), is the stream sequence of the
	// agent's last event the snapshot covers: the compaction that wrote it
	// purged the agent's events up to there, read or not.
	Seq, Covers uint64
}

// snapshotType is how a snapshot's envelope names its type.
var snapshotType = []byte(`"type":"` + eventlog.TypeSnapshot + `"`)

// covers returns the stream sequence of the last event the snapshot part
// body covers, 0 when body is not a snapshot part.
func covers(body []byte) uint64 {
	if !bytes.Contains(body, snapshotType) {
		return 0
	}
	var e struct {
		Type string `json:"type"`
		Data struct {
			Upto eventlog.Seq `json:"upto"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &e) != nil || e.Type != eventlog.TypeSnapshot {
		return 0
	}
	_, raw := eventlog.ShardOf(e.Data.Upto)
	return raw
}

// Kill is one kill to measure.
type Kill struct {
	Killed, End time.Time
	// Victim holds the agents in the victim's share (owned by it, or in
	// a shard it led), as asked just before the kill.
	Victim map[string]bool
	// VictimNode, when set, is the killed node: an agent whose last event
	// before the kill it wrote is the victim's too. The owner asked just
	// before the kill may be another node that handed the agent to the
	// victim since (a partition moving back to a node that returned).
	VictimNode string
	// Active: an agent with no event within Active before the kill was
	// not writing and is not counted. Limit: a longer stall counts.
	Active, Limit time.Duration
	// ResumeAfterEnd takes a victim's agent's first event after the kill
	// as its resumption even past End.
	ResumeAfterEnd bool
}

// Gap is a stall's bounds: the agent's event before it and after it.
type Gap struct{ Before, After Stamp }

// Result is what a kill did to the agents writing when it came.
type Result struct {
	Victims, Others               int
	VictimsStalled, OthersStalled int
	WorstOther                    time.Duration
	WorstOtherAgent               string
	// WorstOtherGap is where WorstOther was: the events before and after
	// it (After zero when it ran to End). Their writers tell a move (a
	// handoff, another node after) from a pause on one node.
	WorstOtherGap Gap
	// SlowestResume is the longest kill to first event of a victim's
	// agent; Unresumed counts those without one.
	SlowestResume time.Duration
	Unresumed     int
}

// Measure measures agents by their stored events (sorted here by time,
// in place), as the package doc says.
func Measure(agents []string, stamps map[string][]Stamp, k Kill) Result {
	var r Result
	byTime := func(a Stamp, t time.Time) int { return a.At.Compare(t) }
	for _, a := range agents {
		ss := stamps[a]
		slices.SortFunc(ss, func(x, y Stamp) int { return x.At.Compare(y.At) })
		i, _ := slices.BinarySearchFunc(ss, k.Killed, byTime)
		if i == 0 || k.Killed.Sub(ss[i-1].At) > k.Active {
			continue // not writing when the kill came
		}
		last := ss[i-1]
		prev, worst, gap := last, time.Duration(0), Gap{}
		for _, s := range ss[i:] {
			if s.At.After(k.End) {
				break
			}
			if d := s.At.Sub(prev.At); d > worst {
				worst, gap = d, Gap{Before: prev, After: s}
			}
			prev = s
		}
		if d := k.End.Sub(prev.At); d > worst {
			worst, gap = d, Gap{Before: prev}
		}
		stalled := worst > k.Limit
		if k.Victim[a] || (k.VictimNode != "" && last.Node == k.VictimNode) {
			r.Victims++
			if stalled {
				r.VictimsStalled++
			}
			resumed := time.Duration(-1)
			if i < len(ss) && (k.ResumeAfterEnd || !ss[i].At.After(k.End)) {
				resumed = ss[i].At.Sub(k.Killed)
			}
			if resumed < 0 {
				r.Unresumed++
				resumed = k.End.Sub(k.Killed)
			}
			r.SlowestResume = max(r.SlowestResume, resumed)
			continue
		}
		r.Others++
		if stalled {
			r.OthersStalled++
		}
		if worst > r.WorstOther {
			r.WorstOther, r.WorstOtherAgent, r.WorstOtherGap = worst, a, gap
		}
	}
	return r
}

// Stored reads the stamps (stored time, writer) of the events on each
// stream's subjects (byStream; an agent is its subject's last token) from
// from on, up to
// about to (zero: to the last event the stream's leader held when the
// read began), trying again up to 10 times a second apart when a stream
// answers an error (its leader electing) or the read's consumer stays
// behind the leader.
func Stored(ctx context.Context, js jetstream.JetStream, byStream map[string][]string, from, to time.Time) (map[string][]Stamp, error) {
	var err error
	for range 10 {
		var out map[string][]Stamp
		if out, err = storedOnce(ctx, js, byStream, from, to, readOpts{}); err == nil {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second): // not a synchronisation: a retry's pause
		}
	}
	return nil, err
}

// maxIdleFetches bounds the fetches in a row that deliver nothing while
// the stream's leader holds more up to the read's end: the consumer's
// replica stays behind, and Stored tries again with a new consumer.
const maxIdleFetches = 15

// noWaitPause is the pause after a fetch that returned nothing at once
// (Tail) before the next.
const noWaitPause = 200 * time.Millisecond

// readConsumerIdle is how long the server keeps a read's consumer once
// unused: a read ends within seconds, and the default (5 minutes for an
// ordered consumer) kept one for each read.
const readConsumerIdle = 10 * time.Second

// readOpts are a stream read's fetch size (0: 1000), whether its fetches
// return at once (Tail), when set the consumer sequence last delivered
// (Tail: a plain consumer, kept between reads, whose delivery must not
// skip one), and, when set (tests), a hook that sees each event's
// metadata before the end rule reads it.
type readOpts struct {
	batch     int
	noWait    bool
	consSeq   *uint64
	delivered func(*jetstream.MsgMetadata)
}

// fetch fetches the next batch of cons as o says.
func (o readOpts) fetch(cons jetstream.Consumer) (jetstream.MessageBatch, error) {
	if o.noWait {
		return cons.FetchNoWait(cmp.Or(o.batch, 1000))
	}
	return cons.Fetch(cmp.Or(o.batch, 1000), jetstream.FetchMaxWait(2*time.Second))
}

// storedOnce is one try of Stored.
//
// A stream's read ends at last, the highest last sequence of its subjects
// as the stream's leader holds them, read before its consumer starts, or
// at the first event past to. It does not end on an event the consumer
// delivers with none pending: the consumer sits on any peer of the
// stream, and on a replica behind the leader it has none pending before
// last. A fetch that delivers nothing before last asks the leader for the
// subjects' next events: none up to last (removed meanwhile) ends it.
func storedOnce(ctx context.Context, js jetstream.JetStream, byStream map[string][]string, from, to time.Time, o readOpts) (map[string][]Stamp, error) {
	out := map[string][]Stamp{}
	for stream, subjects := range byStream {
		last, err := leaderLast(ctx, js, stream, subjects)
		if err != nil {
			return nil, fmt.Errorf("read the stall agents' events on %s: %w", stream, err)
		}
		if last == 0 {
			continue // none stored
		}
		cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
			FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &from,
			InactiveThreshold: readConsumerIdle,
		})
		if err != nil {
			return nil, fmt.Errorf("read the stall agents' events on %s: %w", stream, err)
		}
		if _, err := readStream(ctx, js, cons, stream, subjects, 0, last, from, to, o, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readStream reads cons, a consumer of stream's subjects that delivered
// up to stream sequence seen (0: none yet; it starts at from), into out,
// up to last or the first event past to (not zero), as storedOnce says.
// It returns the sequence it read up to.
func readStream(ctx context.Context, js jetstream.JetStream, cons jetstream.Consumer, stream string, subjects []string,
	seen, last uint64, from, to time.Time, o readOpts, out map[string][]Stamp) (uint64, error) {
	fail := func(err error) (uint64, error) {
		return seen, fmt.Errorf("read the stall agents' events on %s: %w", stream, err)
	}
	for done, idle := seen >= last, 0; !done; {
		batch, err := o.fetch(cons)
		if err != nil {
			return fail(err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			md, err := msg.Metadata()
			if err != nil {
				continue
			}
			if o.delivered != nil {
				o.delivered(md)
			}
			if o.consSeq != nil {
				if md.Sequence.Consumer != *o.consSeq+1 {
					return fail(fmt.Errorf("its consumer delivered %d after %d: one was lost", md.Sequence.Consumer, *o.consSeq))
				}
				*o.consSeq = md.Sequence.Consumer
			}
			seen = md.Sequence.Stream
			sub := msg.Subject()
			agent := sub[strings.LastIndexByte(sub, '.')+1:]
			w, _ := eventlog.WriterOf(msg.Headers())
			out[agent] = append(out[agent], Stamp{At: md.Timestamp, Node: w.Node, Seq: md.Sequence.Stream, Covers: covers(msg.Data())})
			if (!to.IsZero() && md.Timestamp.After(to)) || seen >= last {
				done = true
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return fail(err)
		}
		if done || n > 0 {
			idle = 0
			continue
		}
		more, err := leaderHolds(ctx, js, stream, subjects, seen, from, last)
		if err != nil {
			return fail(err)
		}
		if done = !more; more {
			if idle++; idle >= maxIdleFetches {
				return fail(fmt.Errorf("its consumer stays behind the leader at sequence %d of %d", seen, last))
			}
			if o.noWait {
				select {
				case <-ctx.Done():
					return seen, ctx.Err()
				case <-time.After(noWaitPause): // not a synchronisation: a poll's pause
				}
			}
		}
	}
	return seen, nil
}

// Tail reads one stream's events of some subjects as they are stored,
// read after read, through one consumer kept between reads: a reader
// every few seconds would otherwise create a consumer each time, and each
// creation and deletion is an entry every server of the cluster applies
// in the JetStream meta layer (a 6-node chaos run's meta layer fell
// behind with them). It is a plain pull consumer, not nats.go's ordered
// one, which makes a new consumer for each fetch; Tail checks instead
// that its consumer sequences follow one another. A read that fails (a
// skipped delivery, a consumer deleted) drops the consumer; the next
// creates one from after the last event read.
type Tail struct {
	js       jetstream.JetStream
	stream   string
	subjects []string
	from     time.Time
	cons     jetstream.Consumer
	consSeq  uint64
	seen     uint64
}

// tailIdle is how long the server keeps a Tail's consumer once unused:
// longer than a reader's pause between reads.
const tailIdle = 30 * time.Second

// NewTail returns a Tail of stream's subjects from from on.
func NewTail(js jetstream.JetStream, stream string, subjects []string, from time.Time) *Tail {
	return &Tail{js: js, stream: stream, subjects: subjects, from: from}
}

// Read returns the events stored since the last Read (the first: since
// from), up to the last event of the subjects the stream's leader held
// when it began. Its fetches return what the consumer holds at once,
// where Stored's wait up to 2 s for a full batch.
func (t *Tail) Read(ctx context.Context) (map[string][]Stamp, error) {
	last, err := leaderLast(ctx, t.js, t.stream, t.subjects)
	if err != nil {
		return nil, fmt.Errorf("read the stall agents' events on %s: %w", t.stream, err)
	}
	out := map[string][]Stamp{}
	if last <= t.seen {
		return out, nil
	}
	if t.cons == nil {
		cfg := jetstream.ConsumerConfig{FilterSubjects: t.subjects, InactiveThreshold: tailIdle,
			AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, Replicas: 1,
			DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &t.from}
		if t.seen > 0 {
			cfg.DeliverPolicy, cfg.OptStartTime, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, nil, t.seen+1
		}
		if t.cons, err = t.js.CreateConsumer(ctx, t.stream, cfg); err != nil {
			t.cons = nil
			return nil, fmt.Errorf("read the stall agents' events on %s: %w", t.stream, err)
		}
		t.consSeq = 0
	}
	seen, err := readStream(ctx, t.js, t.cons, t.stream, t.subjects, t.seen, last, t.from, time.Time{}, readOpts{noWait: true, consSeq: &t.consSeq}, out)
	if err != nil {
		t.drop(ctx) // the next consumer starts its sequences again
		return nil, err
	}
	t.seen = seen
	return out, nil
}

// drop deletes t's consumer, if the server still has it, and forgets it.
func (t *Tail) drop(ctx context.Context) {
	name := t.cons.CachedInfo().Name
	t.cons = nil
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = t.js.DeleteConsumer(dctx, t.stream, name) // gone already, or the idle threshold removes it
}

// leaderLast returns the highest last sequence of subjects in stream, as
// its leader holds them; 0 when none holds a message.
func leaderLast(ctx context.Context, js jetstream.JetStream, stream string, subjects []string) (uint64, error) {
	var last uint64
	for _, subj := range subjects {
		seq, err := leaderread.Last(ctx, js, stream, subj)
		if err != nil {
			return 0, err
		}
		last = max(last, seq)
	}
	return last, nil
}

// leaderHolds reports whether stream's leader holds a message on one of
// subjects after seen (with seen 0: stored since since, where the
// consumer starts) up to last.
func leaderHolds(ctx context.Context, js jetstream.JetStream, stream string, subjects []string, seen uint64, since time.Time, last uint64) (bool, error) {
	for _, subj := range subjects {
		var seq uint64
		var err error
		if seen == 0 {
			seq, err = leaderread.NextSince(ctx, js, stream, subj, since)
		} else {
			seq, err = leaderread.Next(ctx, js, stream, subj, seen+1)
		}
		if err != nil {
			return false, err
		}
		if seq != 0 && seq <= last {
			return true, nil
		}
	}
	return false, nil
}
