package eventlog

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// Filter selects the events a reader sees.
//
//   - Filter{} is every agent's lifecycle events.
//   - Filter{Agent: "a"} is agent a's lifecycle events.
//   - Filter{Chunks: true} is every chunk; with Agent, that agent's chunks;
//     with Agent and Stream, the chunks of one chat stream.
type Filter struct {
	Agent  string
	Stream string
	Chunks bool
}

// filter returns the subject f selects and the stream that holds it. Of a
// sharded log, a filter without an agent spans every shard: stream is then
// shard 0's, and the subject, every partition's (see shardsOf).
func (l *Log) filter(f Filter) (subject, stream string, err error) {
	tok := func(s string) (string, error) {
		if s == "" {
			return "*", nil
		}
		if !ValidToken(s) {
			return "", invalidf("%q is not a valid subject token", s)
		}
		return s, nil
	}
	agent, err := tok(f.Agent)
	if err != nil {
		return "", "", err
	}
	part := ""
	if l.sharded() {
		part = "*."
		if f.Agent != "" {
			part = l.partToken(f.Agent)
		}
	}
	if f.Stream == "" && !f.Chunks {
		stream := l.streamFor(f.Agent, false)
		if l.handleOf(stream).st == nil {
			return "", "", invalidf("this log was opened with ChunksOnly: it reads chunks only")
		}
		return l.cfg.Prefix + ".evt." + part + agent, stream, nil
	}
	s, err := tok(f.Stream)
	if err != nil {
		return "", "", err
	}
	return l.cfg.Prefix + ".chunk." + part + agent + "." + s, l.streamFor(f.Agent, true), nil
}

// shardsOf reports whether f spans several streams: a filter without an
// agent, of a sharded log with more than one shard. Then f's streams are
// l.streamNames(chunks).
func (l *Log) shardsOf(f Filter) (spans, chunks bool) {
	return l.cfg.Shards > 1 && f.Agent == "", f.Chunks || f.Stream != ""
}

// LastSeq returns the stream sequence of the last event matching f, or 0 when
// there is none. Of a sharded log with several shards, a filter without an
// agent spans them: LastSeq returns SeqEnds, which no one sequence is.
func (l *Log) LastSeq(ctx context.Context, f Filter) (Seq, error) {
	subject, stream, err := l.filter(f)
	if err != nil {
		return 0, err
	}
	if spans, _ := l.shardsOf(f); spans {
		return SeqEnds, nil
	}
	if f.Stream != "" && l.cfg.Owner != nil {
		return l.lastChunkSeq(ctx, f.Agent, f.Stream, stream, subject)
	}
	return l.lastSeq(ctx, stream, subject)
}

// lastChunkSeq is lastSeq of agent's chat stream's chunks (subject, in
// stream). When this process owns agent, what it reads is also what
// prepareChunks would read before the stream's first chunk is queued: it
// is recorded in the agent's fence under the token held when the read
// began, as prepareChunks records it, so a turn that read its stream's
// last sequence (chat's start cursor) sends its first chunk without a
// read of its own. That is the fence's read made earlier: a chunk another
// writer stored since is still found by the send, refused for its
// expected last subject sequence.
func (l *Log) lastChunkSeq(ctx context.Context, agent, chatStream, stream, subject string) (Seq, error) {
	f, tok, cerr := l.claim(agent)
	last, err := l.lastSeq(ctx, stream, subject)
	if err != nil || cerr != nil {
		return last, err
	}
	f.mu.Lock()
	if f.mu.tok == tok {
		if _, known := f.mu.streams[chatStream]; !known {
			f.mu.streams[chatStream] = last
		}
	}
	f.mu.Unlock()
	return last, nil
}

func (l *Log) lastSeq(ctx context.Context, stream, subject string) (Seq, error) {
	if info := l.stream(stream).CachedInfo(); info != nil && info.Config.Replicas > 1 {
		// A direct get may be answered by a replica that lags behind the
		// write a reader must see.
		return l.leaderLastSeq(ctx, stream, subject)
	}
	m, err := l.stream(stream).GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, readFailed("last sequence of "+subject, err)
	}
	return l.seqOf(stream, m.Sequence), nil
}

// Last returns the last event matching f, with one direct get; ok is false
// when there is none. A stored event that cannot be decoded is returned with
// ok and a *CorruptError.
func (l *Log) Last(ctx context.Context, f Filter) (e Event, ok bool, err error) {
	subject, stream, err := l.filter(f)
	if err != nil {
		return Event{}, false, err
	}
	if l.closed() {
		return Event{}, false, ErrClosed
	}
	m, err := l.stream(stream).GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Event{}, false, nil
	}
	if err != nil {
		return Event{}, false, readFailed("last event of "+subject, err)
	}
	return l.decodeRaw(stream, m)
}

// Next returns the first event matching f stored after sequence after, with
// one direct get instead of a consumer; ok is false when there is none yet.
// It is how a replay shows its first event in one round trip: Follow from
// the returned event's Seq for the rest. Pending is not set. A stored event
// that cannot be decoded is returned with ok and a *CorruptError.
func (l *Log) Next(ctx context.Context, f Filter, after Seq) (e Event, ok bool, err error) {
	subject, stream, err := l.filter(f)
	if err != nil {
		return Event{}, false, err
	}
	if l.closed() {
		return Event{}, false, ErrClosed
	}
	m, err := l.stream(stream).GetMsg(ctx, rawSeq(after)+1, jetstream.WithGetMsgSubject(subject))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Event{}, false, nil
	}
	if err != nil {
		return Event{}, false, readFailed(fmt.Sprintf("next of %s after %d", subject, after), err)
	}
	return l.decodeRaw(stream, m)
}

// NextBatch is Next for up to limit events (at least 1): the events
// matching f stored after sequence after, in order, with batched direct
// gets (no consumer, no leader read); none when there is none yet. A
// direct get may be answered by a replica behind the leader, so what it
// returns is a prefix of what is stored (a replica stores the stream in
// order): a Follow from the last one's Seq goes on without a gap or a
// double. A stored event that cannot be decoded ends the batch: it is
// returned last, with its Seq and Subject, together with its
// *CorruptError. Pending is not set.
//
// It is how a follow reads what is already stored without creating a
// consumer (which in a cluster costs two proposals of the JetStream meta
// group, applied by every server): a replay of a stream stored to its end
// needs none. Against a server without batched direct gets it reads one
// event, as Next does. Each call subscribes synchronously for the batch:
// a connection whose nats.SyncQueueLen is small but above limit (agentd's
// is 1,024) saves nats.go's default 512 KiB channel a call.
func (l *Log) NextBatch(ctx context.Context, f Filter, after Seq, limit int) ([]Event, error) {
	subject, stream, err := l.filter(f)
	if err != nil {
		return nil, err
	}
	if l.closed() {
		return nil, ErrClosed
	}
	msgs, err := jetstreamext.GetBatch(ctx, l.js, stream, max(1, limit),
		jetstreamext.GetBatchSeq(rawSeq(after)+1), jetstreamext.GetBatchSubject(subject),
		jetstreamext.GetBatchMaxBytes(readBatchBytes))
	if err != nil {
		return nil, readFailed(fmt.Sprintf("next of %s after %d", subject, after), err)
	}
	var out []Event
	for m, err := range msgs {
		if errors.Is(err, jetstreamext.ErrNoMessages) {
			break
		}
		if errors.Is(err, jetstreamext.ErrBatchUnsupported) {
			e, ok, err := l.Next(ctx, f, after)
			if !ok {
				return nil, err
			}
			return []Event{e}, err
		}
		if err != nil {
			if len(out) > 0 {
				return out, nil // the rest is the follow's
			}
			return nil, readFailed(fmt.Sprintf("next of %s after %d", subject, after), err)
		}
		e, _, err := l.decodeRaw(stream, m)
		out = append(out, e)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// decodeRaw decodes a message of stream read with a direct get, as Next
// and Last return it.
func (l *Log) decodeRaw(stream string, m *jetstream.RawStreamMsg) (Event, bool, error) {
	seq := l.seqOf(stream, m.Sequence)
	e, err := decodeMsg(seq, m.Subject, m.Data)
	if err != nil {
		return Event{Seq: seq, Subject: m.Subject}, true, err
	}
	e.Writer, _ = WriterOf(m.Header)
	return e, true, nil
}

// stream returns the log's stream called name (nil for none, or an
// events stream of a ChunksOnly log).
func (l *Log) stream(name string) jetstream.Stream {
	if h := l.handleOf(name); h != nil {
		return h.st
	}
	return nil
}

// Read returns the events matching f stored after sequence after, up to the
// last one stored when Read was called, at most limit of them (0: no limit).
// A corrupt stored event ends the read with a *CorruptError naming its
// sequence; the events before it are returned. The caller owns the slice.
//
// Read uses batched direct gets (jetstreamext.GetBatch), which need no
// consumer: a consumer per read costs a meta-layer proposal in a cluster,
// and nats-server 2.15 caps a stream at 1,000 of them. A direct get may be
// answered by a replica behind the last sequence; when the batches end
// before it, Read goes on through an ordered consumer on the leader (as
// when events between were removed: chunks age out). Events removed while
// Read reads (aged out, purged) end it with those still stored, once the
// stream's leader holds none after the last one read
// (TestReadOfRemovedEventsEnds).
//
// Of a sharded log, a filter without an agent reads the shards in order:
// every Seq of shard k is below those of shard k+1, so after names the
// shard to go on in, and a read that finds nothing more in it goes on in
// the next.
func (l *Log) Read(ctx context.Context, f Filter, after Seq, limit int) ([]Event, error) {
	subject, stream, err := l.filter(f)
	if err != nil {
		return nil, err
	}
	if l.closed() {
		return nil, ErrClosed
	}
	if spans, chunks := l.shardsOf(f); spans {
		names := l.streamNames(chunks)
		for k, _ := ShardOf(after); k < len(names); k++ {
			from := after
			if k0, _ := ShardOf(after); k0 != k {
				from = shardSeq(k, 0)
			}
			out, err := l.read(ctx, names[k], subject, from, limit)
			if err != nil || len(out) > 0 {
				return out, err
			}
		}
		return nil, nil
	}
	return l.read(ctx, stream, subject, after, limit)
}

// read is Read of one stream.
func (l *Log) read(ctx context.Context, stream, subject string, after Seq, limit int) ([]Event, error) {
	last, err := l.lastSeq(ctx, stream, subject)
	if err != nil || last <= after {
		return nil, err
	}
	if l.beforeRead != nil {
		l.beforeRead()
	}
	out, next, done, err := l.readDirect(ctx, stream, subject, after, last, limit)
	if err != nil || done {
		return out, err
	}
	// The consumer delivers nothing of what was removed since last was
	// read (aged out, purged): a watch ends the read once the leader holds
	// nothing more of it, instead of waiting for it forever.
	fctx, stop := context.WithCancelCause(ctx)
	var at atomic.Uint64
	at.Store(uint64(next))
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		l.watchRemoved(fctx, stop, stream, subject, &at, last)
	}()
	defer func() {
		stop(nil)
		<-watched
	}()
	for e, err := range l.follow(fctx, stream, subject, next) {
		if err != nil {
			if ctx.Err() == nil && errors.Is(context.Cause(fctx), errRangeRemoved) {
				return out, nil
			}
			return out, err
		}
		at.Store(uint64(e.Seq))
		out = append(out, e)
		if e.Seq >= last || (limit > 0 && len(out) >= limit) {
			break
		}
		if e.Pending == 0 {
			// Nothing more matched when this was delivered, on the
			// consumer's server: JetStream places it on any replica, and
			// one behind the leader has none pending before last. The
			// leader tells whether anything up to last is still stored
			// after e; if not, the read ends (the rest was removed: chunks
			// age out).
			seq, _, err := l.leaderGet(ctx, stream, map[string]any{"next_by_subj": subject, "seq": rawSeq(e.Seq) + 1})
			if err != nil {
				return out, readFailed(fmt.Sprintf("read %s after %d", subject, e.Seq), err)
			}
			if seq == 0 || seq > last {
				break
			}
		}
	}
	return out, nil
}

// errRangeRemoved is the cause watchRemoved ends a read's consumer with.
var errRangeRemoved = errors.New("eventlog: the rest of the read was removed")

// readRemovedCheck is how long a read's consumer may deliver nothing before
// watchRemoved asks the stream's leader whether what it waits for is still
// stored.
const readRemovedCheck = 250 * time.Millisecond

// watchRemoved stops a read's consumer (stop, with errRangeRemoved) once it
// has delivered nothing for readRemovedCheck and the stream's leader holds
// no event on subject after the last one delivered (at) up to last: they
// were removed, and the consumer would wait for them forever. It returns
// when ctx is done. A leader that does not answer is asked again at the
// next check; ctx bounds the read then.
func (l *Log) watchRemoved(ctx context.Context, stop context.CancelCauseFunc, stream, subject string, at *atomic.Uint64, last Seq) {
	tick := time.NewTicker(readRemovedCheck)
	defer tick.Stop()
	seen := at.Load()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if pos := at.Load(); pos != seen {
			seen = pos
			continue
		}
		seq, _, err := l.leaderGet(ctx, stream, map[string]any{"next_by_subj": subject, "seq": rawSeq(Seq(seen)) + 1})
		if err != nil {
			continue
		}
		if seq == 0 || seq > last {
			stop(errRangeRemoved)
			return
		}
	}
}

// readBatch is how many events one batched direct get asks for, and
// readBatchBytes how many bytes: a run of events near the max payload (the
// parts of a large chunk) is read in several batches, each answered well
// within the request's stall timeout, instead of one the client gives up
// on while the server still sends it.
const (
	readBatch      = 256
	readBatchBytes = 8 << 20
)

// readDirect reads with batched direct gets what Read returns, and reports
// done once it has all of it; otherwise the events up to next are read and
// the rest is for a consumer.
func (l *Log) readDirect(ctx context.Context, stream, subject string, after, last Seq, limit int) (out []Event, next Seq, done bool, err error) {
	next = after
	if l.directNone != nil && l.directNone() {
		return nil, next, false, nil
	}
	for {
		batch := readBatch
		if limit > 0 {
			batch = min(batch, limit-len(out))
		}
		msgs, err := jetstreamext.GetBatch(ctx, l.js, stream, batch,
			jetstreamext.GetBatchSeq(rawSeq(next)+1), jetstreamext.GetBatchSubject(subject),
			jetstreamext.GetBatchMaxBytes(readBatchBytes))
		if err != nil {
			return out, next, false, readFailed("read "+subject, err)
		}
		n := 0
		for m, err := range msgs {
			if errors.Is(err, jetstreamext.ErrNoMessages) {
				break
			}
			if errors.Is(err, jetstreamext.ErrBatchUnsupported) {
				return out, next, false, nil // the consumer reads it all
			}
			if err != nil {
				return out, next, false, readFailed("read "+subject, err)
			}
			n++
			e, _, err := l.decodeRaw(stream, m)
			if err != nil {
				return out, next, true, err
			}
			if p, perr := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64); perr == nil {
				e.Pending = p
			}
			out = append(out, e)
			next = e.Seq
			if e.Seq >= last || (limit > 0 && len(out) >= limit) {
				return out, next, true, nil
			}
		}
		if n == 0 {
			return out, next, false, nil // ended before last: a lagging replica, or removed events
		}
	}
}

// followMaxBytes bounds the bytes one pull of Follow's consumer asks
// for: under the client's pending limit (64 MiB), so a run of events each
// near the max payload (the parts of a chunk of tens of MiB) is read in
// several pulls instead of overflowing the subscription.
const followMaxBytes = 16 << 20

// Follow yields every event matching f stored after sequence after, in order
// and once each: first the stored ones, then live ones as they are appended,
// through one ordered consumer, so there is no gap between history and live.
// It ends when ctx is done (yielding ctx's error) or the caller stops ranging.
//
// A stored event that cannot be decoded is yielded as a *CorruptError (with
// Seq and Subject set on the event); ranging may go on past it.
//
// Of a sharded log with several shards, a filter without an agent is
// refused (ErrInvalid): follow an agent, or use a Follower, which follows
// every shard.
func (l *Log) Follow(ctx context.Context, f Filter, after Seq) iter.Seq2[Event, error] {
	subject, stream, err := l.filter(f)
	if spans, _ := l.shardsOf(f); spans && err == nil {
		err = invalidf("follow %s: a filter without an agent spans the shards of the log; follow an agent, or use a Follower", subject)
	}
	if err != nil {
		return func(yield func(Event, error) bool) { yield(Event{}, err) }
	}
	return l.follow(ctx, stream, subject, after)
}

func (l *Log) follow(ctx context.Context, stream, subject string, after Seq) iter.Seq2[Event, error] {
	return l.followSubjects(ctx, stream, []string{subject}, after, followOpts{})
}

// followOpts are a views follow's: place, a consumer placed on a replica
// far behind is placed again (placement.go).
type followOpts struct {
	place bool
}

// followHeartbeat is the heartbeat of every follow's consumer (the
// views', a client's Follow: a chat stream's replay and live tail, the
// gateway's reads), two of which missed have nats.go recreate it. At the
// library's 5 s, a consumer whose server died was made again 10 s after
// the death: a views consumer on a killed server then waited for a new
// owner's recovery to ask for a new one (renewAfter), 2 s into the
// recovery (half of the renewals of a 6-node chaos run, stop 61), and a
// client's follow whose server stopped (a third of them in a rolling
// deploy of 3 nodes) waited the 10 s. At 1 s the library makes it again
// 2 s after the death, before the dead node's partitions are handed over
// (its leases' TTL). It costs one status message a second per consumer
// while idle.
const followHeartbeat = time.Second

// followSubjects is follow of several subjects of stream, which must not
// overlap (one ordered consumer with several filters), with opts.
func (l *Log) followSubjects(ctx context.Context, stream string, subjects []string, after Seq, opts followOpts) iter.Seq2[Event, error] {
	subject := strings.Join(subjects, ",")
	return func(yield func(Event, error) bool) {
		if l.closed() {
			yield(Event{}, ErrClosed)
			return
		}
		cons, err := l.orderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
			FilterSubjects: subjects,
			DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:    rawSeq(after) + 1,
		})
		if err != nil {
			yield(Event{}, fmt.Errorf("eventlog: follow %s: %w", subject, l.consumerLimit(stream, err)))
			return
		}
		next, err := consumeOf(cons, jetstream.PullMaxMessagesWithBytesLimit(512, followMaxBytes),
			jetstream.PullHeartbeat(followHeartbeat))
		if err != nil {
			l.dropConsumer(stream, cons)
			yield(Event{}, fmt.Errorf("eventlog: follow %s: %w", subject, l.consumerLimit(stream, err)))
			return
		}
		// wctx ends the wait for the next message when the placement
		// check (placement.go) finds the consumer on a replica far
		// behind; the check runs beside the first deliveries, so a
		// stream without a leader for a moment delays nothing.
		wctx, stopWait := context.WithCancelCause(ctx)
		defer stopWait(nil)
		if opts.place {
			go func() {
				if server, behind := l.placedBehind(wctx, stream, cons); behind {
					stopWait(&placedBehindError{stream: stream, server: server})
				}
			}()
		}
		// The iterator returns at ctx's end without waiting for the
		// consumer: while an ordered consumer recreates itself after
		// losing its server, nats.go holds its lock for each create
		// (up to 10 s an attempt), and Stop and CachedInfo wait for it.
		// A view's shard follower restarted then (a new owner taking a
		// killed node's partitions) held its node's recovery that long
		// (TestFollowCancelledWhileItsConsumerIsRecreated). So they run
		// in the background.
		defer func() {
			next.quit()
			go func() {
				next.stopConsuming()
				l.dropConsumer(stream, cons)
			}()
		}()
		for {
			m, err := next.next(wctx)
			if err != nil {
				if ctx.Err() != nil {
					yield(Event{}, ctx.Err())
					return
				}
				if pe := (*placedBehindError)(nil); errors.As(context.Cause(wctx), &pe) {
					yield(Event{}, pe)
					return
				}
				// The consumer stopped (its connection closed).
				yield(Event{}, fmt.Errorf("eventlog: follow %s: %w", subject, err))
				return
			}
			md, err := m.Metadata()
			if err != nil {
				if !yield(Event{}, fmt.Errorf("eventlog: follow %s: metadata: %w", subject, err)) {
					return
				}
				continue
			}
			seq := l.seqOf(stream, md.Sequence.Stream)
			e, err := decodeMsg(seq, m.Subject(), m.Data())
			if err != nil {
				e = Event{Seq: seq, Subject: m.Subject()}
			}
			e.Pending = md.NumPending
			e.Writer, _ = WriterOf(m.Headers())
			if l.followDelivered != nil {
				l.followDelivered(ctx, &e)
			}
			if !yield(e, err) {
				return
			}
		}
	}
}

// pulled is a message a consumer delivered, or the error that ended it.
type pulled struct {
	m   jetstream.Msg
	err error
}

// nexter hands what a consumer's Consume delivers to a reader that can
// stop waiting at any time (a delivery may wait while the ordered
// consumer recreates itself, which no context ends). It consumes rather
// than iterating Messages: nats.go's ordered consumer makes itself again
// when a pull is answered "no responders" only under Consume, while a
// Messages iterator waits for two missed heartbeats. One made while its
// stream steps down is so answered 2-9 times in 100 (bench
// follow-stepdown, stop 66).
type nexter struct {
	ch   chan pulled
	stop chan struct{} // closed by quit
	cc   jetstream.ConsumeContext
}

// errConsumeEnded is what a nexter yields once its consumer stopped on
// its own (its connection closed).
var errConsumeEnded = errors.New("the consumer stopped")

// consumeOf starts consuming cons with opts, handing up to followAhead
// messages ahead to next, until quit, then stopConsuming.
func consumeOf(cons jetstream.Consumer, opts ...jetstream.PullConsumeOpt) (*nexter, error) {
	n := &nexter{ch: make(chan pulled, followAhead), stop: make(chan struct{})}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case n.ch <- pulled{m: m}:
		case <-n.stop:
		}
	}, opts...)
	if err != nil {
		return nil, err
	}
	n.cc = cc
	closed := cc.Closed()
	go func() {
		select {
		case <-closed:
			select {
			case n.ch <- pulled{err: errConsumeEnded}:
			case <-n.stop:
			}
		case <-n.stop:
		}
	}()
	return n, nil
}

// next returns the next message delivered, or ctx's error once ctx ends.
func (n *nexter) next(ctx context.Context) (jetstream.Msg, error) {
	select {
	case r := <-n.ch:
		return r.m, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// quit ends the handing over, once; stopConsuming then stops the
// consumer, which may wait for a recreation under way.
func (n *nexter) quit() { close(n.stop) }

// stopConsuming stops the consumer; call it after quit.
func (n *nexter) stopConsuming() { n.cc.Stop() }

// followAhead is how many messages a follow's reader takes ahead of its
// iterator: the consumer pulls up to 512 anyway.
const followAhead = 64

// orderedConsumer creates the ordered consumer of a Read or Follow. The
// server may carry out a create whose answer the client stopped waiting
// for (ctx ended, or the request timed out); nothing would delete that
// consumer, and it held one of the stream's consumers until its
// inactivity threshold (5 minutes). So the create does not end with ctx:
// it goes on under the client library's request timeout, and when ctx
// ends first, the consumer it makes is dropped once it is answered. A
// create that fails is followed by a delete of the consumer it named, in
// case the server made it after the client gave up; one refused for the
// consumer limit was not made.
// TestFollowCancelledWhileCreatingLeavesNoConsumer.
func (l *Log) orderedConsumer(ctx context.Context, stream string, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The library names the consumers of an ordered consumer
	// {NamePrefix}_{serial}, from 1.
	cfg.NamePrefix = nuid.Next()
	type created struct {
		cons jetstream.Consumer
		err  error
	}
	res := make(chan created, 1)
	go func() {
		cons, err := l.js.OrderedConsumer(context.WithoutCancel(ctx), stream, cfg)
		if err != nil && !errors.Is(err, jetstream.ErrMaximumConsumersLimit) {
			l.dropConsumerNamed(stream, cfg.NamePrefix+"_1")
		}
		res <- created{cons, err}
	}()
	select {
	case r := <-res:
		return r.cons, r.err
	case <-ctx.Done():
		go func() {
			if r := <-res; r.err == nil {
				l.dropConsumer(stream, r.cons)
			}
		}()
		return nil, ctx.Err()
	}
}

// dropConsumer deletes the ordered consumer a Read or Follow is done with,
// in the background. The client library only stops it, and the server
// keeps it until its inactivity threshold (5 minutes): since nats-server
// 2.15 caps a stream at 1,000 consumers by default, more than 1,000 reads
// in 5 minutes then failed (TestReadsLeaveNoConsumers). A delete that
// fails (the consumer's server is down) leaves it to that threshold.
func (l *Log) dropConsumer(stream string, cons jetstream.Consumer) {
	if info := cons.CachedInfo(); info != nil {
		l.dropConsumerNamed(stream, info.Name)
	}
}

// dropConsumerNamed deletes stream's consumer name in the background,
// as dropConsumer does.
func (l *Log) dropConsumerNamed(stream, name string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), dropConsumerTimeout)
		defer cancel()
		if err := l.js.DeleteConsumer(ctx, stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			l.logger.Debug("delete a finished reader's consumer", "stream", stream, "consumer", name, "err", err)
		}
	}()
}

// dropConsumerTimeout bounds dropConsumer's delete.
const dropConsumerTimeout = 5 * time.Second
