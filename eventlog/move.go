package eventlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Moving an unsharded log into shards (MoveToShards). The move runs while
// nothing writes the log (agentd's nodes are stopped: agentd shards move),
// and in steps that a crash at any point lets a second run finish:
//
//  1. Park: the unsharded streams' subjects become <prefix>.moving.evt.>
//     and <prefix>.moving.chunk.>, so a writer of the old layout that was
//     left running finds no stream for its subjects (its appends fail),
//     and the shard streams' subjects no longer overlap theirs. The stored
//     messages keep their subjects.
//  2. Copy: shard streams left by an interrupted move are deleted (while the
//     unsharded streams exist, a shard stream can only be one), created
//     anew, and every stored message is copied in stream order to its
//     agent's subject of the sharded layout, with its headers (type,
//     writer and epoch: fencing and verify read them) but none of
//     JetStream's own (Nats-*: message ids, expected sequences, batches).
//     A stored reference to a sequence (a snapshot's, a fork's or a
//     tombstone's Upto) is rewritten to the sequence that takes its place
//     (moveMap). Each copy's acknowledged sequence is the one predicted,
//     and the counts are compared at the end.
//  3. The caller records the layout (ownership's stored shard count and
//     record format): from then on no node of the old layout starts.
//  4. FinishMove deletes the unsharded streams.
//
// Message timestamps are those of the copy: chunks (removed by age) live
// a chunk age again from the move.

// ErrNothingToMove is returned by MoveToShards for a log without unsharded
// streams: never created, or already moved (FinishMove ran).
var ErrNothingToMove = errors.New("eventlog: no unsharded streams to move")

// movingToken is the second subject token of a parked stream's subjects.
const movingToken = "moving"

// moveAckWindow bounds the copies in flight.
const moveAckWindow = 4096

// MoveReport is what MoveToShards copied.
type MoveReport struct {
	// Events and Chunks are the messages copied of each kind.
	Events, Chunks uint64
	// Agents is the number of agents with events or chunks.
	Agents int
	// Remapped counts the stored sequence references rewritten.
	Remapped int
	// PerShard is the messages copied into each shard, events and chunks.
	PerShard []uint64
	// Took is how long the copy took.
	Took time.Duration
}

// MoveToShards copies the unsharded log of cfg's streams (cfg.EventsStream,
// cfg.ChunksStream) into the sharded layout cfg describes (cfg.Shards above
// 0, cfg.Partitions), as described above (steps 1 and 2). Nothing may
// write the log meanwhile. It leaves the unsharded streams parked; once the
// caller recorded the new layout, FinishMove deletes them. Errors:
// ErrNothingToMove; ErrInvalid for a cfg without shards, with Bind or Dir;
// JetStream's; a copy whose sequence or count is not the predicted one.
func MoveToShards(ctx context.Context, cfg Config) (MoveReport, error) {
	start := time.Now()
	cfg.ensureDefaults()
	if err := cfg.Validate(); err != nil {
		return MoveReport{}, err
	}
	if cfg.Shards < 1 || cfg.Bind || cfg.Dir != "" {
		return MoveReport{}, invalidf("move to shards: the target needs shards, and no Bind or Dir")
	}
	js, err := jetstream.New(cfg.Conn, jetstream.WithPublishAsyncMaxPending(moveAckWindow))
	if err != nil {
		return MoveReport{}, fmt.Errorf("eventlog: jetstream: %w", err)
	}
	old := map[bool]jetstream.Stream{}
	for _, chunks := range []bool{false, true} {
		name, kind := cfg.EventsStream, ".evt.>"
		if chunks {
			name, kind = cfg.ChunksStream, ".chunk.>"
		}
		st, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return MoveReport{}, fmt.Errorf("%w: stream %s", ErrNothingToMove, name)
		}
		if err != nil {
			return MoveReport{}, fmt.Errorf("eventlog: stream %s: %w", name, err)
		}
		sc := st.CachedInfo().Config
		parked := []string{cfg.Prefix + "." + movingToken + kind}
		if !slices.Equal(sc.Subjects, parked) {
			sc.Subjects = parked
			if st, err = js.UpdateStream(ctx, sc); err != nil {
				return MoveReport{}, fmt.Errorf("eventlog: park stream %s: %w", name, err)
			}
		}
		old[chunks] = st
	}
	// Shard streams of an interrupted move: the copy starts again.
	for _, chunks := range []bool{false, true} {
		base := cfg.EventsStream
		if chunks {
			base = cfg.ChunksStream
		}
		for k := range cfg.Shards {
			name := ShardStreamName(base, k)
			if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				return MoveReport{}, fmt.Errorf("eventlog: delete %s of an interrupted move: %w", name, err)
			}
		}
	}
	target, err := Open(ctx, cfg)
	if err != nil {
		return MoveReport{}, err
	}
	defer target.Close()
	mv := &mover{
		js: js, l: target, maps: map[bool]map[string][]movePair{false: {}, true: {}},
		next: map[string]uint64{}, perShard: make([]uint64, cfg.Shards), logger: cfg.Logger.With("subsystem", "eventlog", "op", "move"),
	}
	for _, n := range append(target.EventsStreams(), target.ChunksStreams()...) {
		mv.next[n] = 1
	}
	var rep MoveReport
	// Events before chunks: a chunk references no event, and the order
	// within each kind is what the copy keeps.
	for _, chunks := range []bool{false, true} {
		n, err := mv.copyStream(ctx, old[chunks], chunks)
		if err != nil {
			return MoveReport{}, err
		}
		if chunks {
			rep.Chunks = n
		} else {
			rep.Events = n
		}
	}
	agents := map[string]bool{}
	for _, m := range mv.maps {
		for a := range m {
			agents[a] = true
		}
	}
	rep.Agents, rep.Remapped, rep.PerShard, rep.Took = len(agents), mv.remapped, mv.perShard, time.Since(start)
	return rep, nil
}

// FinishMove deletes the unsharded streams of cfg after MoveToShards, once
// the new layout is recorded. Streams already gone are no error; a stream
// that is not parked is refused (it is not one a move copied).
func FinishMove(ctx context.Context, cfg Config) error {
	cfg.ensureDefaults()
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return fmt.Errorf("eventlog: jetstream: %w", err)
	}
	for _, name := range []string{cfg.EventsStream, cfg.ChunksStream} {
		st, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("eventlog: stream %s: %w", name, err)
		}
		subs := st.CachedInfo().Config.Subjects
		if len(subs) != 1 || !strings.HasPrefix(subs[0], cfg.Prefix+"."+movingToken+".") {
			return invalidf("finish move: stream %s is not parked by a move (subjects %v)", name, subs)
		}
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("eventlog: delete %s after the move: %w", name, err)
		}
	}
	return nil
}

// movePair is one copied message of an agent: its sequence in the
// unsharded stream and the Seq of its copy.
type movePair struct{ old, new Seq }

// mover is the state of one MoveToShards.
type mover struct {
	js jetstream.JetStream
	l  *Log // the target, sharded
	// maps holds, per kind (chunks or not) and agent, its copied messages
	// in order.
	maps     map[bool]map[string][]movePair
	next     map[string]uint64 // stream -> the sequence its next copy gets
	perShard []uint64
	remapped int
	logger   *slog.Logger
}

// pending is a copy in flight and the sequence it must get.
type pending struct {
	f      jetstream.PubAckFuture
	stream string
	seq    uint64
}

// copyStream copies every message stored in st (parked: nothing writes it)
// and returns how many.
func (mv *mover) copyStream(ctx context.Context, st jetstream.Stream, chunks bool) (uint64, error) {
	info, err := st.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("eventlog: move: stream info: %w", err)
	}
	want, last := info.State.Msgs, info.State.LastSeq
	if want == 0 {
		return 0, nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return 0, fmt.Errorf("eventlog: move: read %s: %w", info.Config.Name, err)
	}
	defer mv.dropConsumer(ctx, info.Config.Name, cons)
	next, err := consumeOf(cons, jetstream.PullMaxMessages(1024))
	if err != nil {
		return 0, fmt.Errorf("eventlog: move: read %s: %w", info.Config.Name, err)
	}
	defer next.stopConsuming() // after quit, before dropConsumer
	defer next.quit()
	var inflight []pending
	flush := func() error {
		for _, p := range inflight {
			select {
			case ack := <-p.f.Ok():
				if ack.Stream != p.stream || ack.Sequence != p.seq {
					return fmt.Errorf("eventlog: move: a copy was stored as %s %d, not %s %d: something else writes the shard streams; stop it and run the move again",
						ack.Stream, ack.Sequence, p.stream, p.seq)
				}
			case err := <-p.f.Err():
				return fmt.Errorf("eventlog: move: copy to %s: %w", p.stream, err)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		inflight = inflight[:0]
		return nil
	}
	var n uint64
	for {
		msg, err := next.next(ctx)
		if err != nil {
			return n, fmt.Errorf("eventlog: move: read %s: %w", info.Config.Name, err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return n, fmt.Errorf("eventlog: move: read %s: %w", info.Config.Name, err)
		}
		out, stream, err := mv.rewrite(msg, Seq(md.Sequence.Stream), chunks)
		if err != nil {
			return n, err
		}
		f, err := mv.js.PublishMsgAsync(out)
		if err != nil {
			return n, fmt.Errorf("eventlog: move: copy to %s: %w", stream, err)
		}
		inflight = append(inflight, pending{f: f, stream: stream, seq: mv.next[stream] - 1})
		n++
		if len(inflight) >= moveAckWindow/2 || md.Sequence.Stream >= last {
			if err := flush(); err != nil {
				return n, err
			}
		}
		if md.Sequence.Stream >= last {
			break
		}
	}
	if n != want {
		return n, fmt.Errorf("eventlog: move: copied %d messages of %s, which holds %d", n, info.Config.Name, want)
	}
	mv.logger.Info("stream copied into shards", "stream", info.Config.Name, "messages", n)
	return n, nil
}

// dropConsumer deletes the ordered consumer copyStream read stream with,
// on every path, a failed copy's too: the client library only stops it,
// and the server would keep it for its inactivity threshold (5 minutes),
// one more of the stream's consumers per move run. The delete is bounded
// and outlives ctx; one that fails (the server is down) is logged and
// leaves the consumer to that threshold.
func (mv *mover) dropConsumer(ctx context.Context, stream string, cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dropConsumerTimeout)
	defer cancel()
	if err := mv.js.DeleteConsumer(dctx, stream, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		mv.logger.Warn("delete the move's reader of a stream; the server drops it when idle", "stream", stream, "consumer", info.Name, "err", err)
	}
}

// rewrite returns the copy of msg (sequence old of the unsharded stream)
// for the sharded layout, the name of the stream it goes to, and records
// its predicted sequence there.
func (mv *mover) rewrite(msg jetstream.Msg, old Seq, chunks bool) (*nats.Msg, string, error) {
	prefix := mv.l.cfg.Prefix
	kind := ".evt."
	if chunks {
		kind = ".chunk."
	}
	rest, ok := strings.CutPrefix(msg.Subject(), prefix+kind)
	agent, _, _ := strings.Cut(rest, ".")
	if !ok || !ValidToken(agent) || (chunks && !strings.Contains(rest, ".")) {
		return nil, "", fmt.Errorf("eventlog: move: message %d has subject %q, not one of the log's", old, msg.Subject())
	}
	p := PartitionOf(agent, mv.l.cfg.Partitions)
	k := p % mv.l.cfg.Shards
	stream := mv.l.streamFor(agent, chunks)
	seq := shardSeq(k, mv.next[stream])
	out := nats.NewMsg(prefix + kind + strconv.Itoa(p) + "." + rest)
	for key, vs := range msg.Headers() {
		if strings.HasPrefix(key, "Nats-") {
			continue
		}
		out.Header[key] = slices.Clone(vs)
	}
	out.Data = msg.Data()
	switch msg.Headers().Get(HeaderType) {
	case TypeSnapshot, TypeForked, TypeDeleted:
		data, err := mv.remapUpto(msg, old, agent, chunks)
		if err != nil {
			return nil, "", err
		}
		out.Data = data
	}
	mv.maps[chunks][agent] = append(mv.maps[chunks][agent], movePair{old: old, new: seq})
	mv.next[stream]++ // after remapUpto, which takes the copies before this one
	mv.perShard[k]++
	return out, stream, nil
}

// remapUpto returns msg's body with its data's "upto" rewritten to the
// sequence of the sharded layout that takes its place. The reference is to
// an event of the same agent (a snapshot's, a tombstone's: to a chunk for
// the chunks tombstone) or of a fork's parent, stored before msg.
func (mv *mover) remapUpto(msg jetstream.Msg, old Seq, agent string, chunks bool) ([]byte, error) {
	e, err := decodeMsg(old, msg.Subject(), msg.Data())
	if err != nil {
		return nil, err
	}
	var data map[string]json.RawMessage
	if err := json.Unmarshal(e.Data, &data); err != nil {
		return nil, &CorruptError{What: "event data of " + e.Type, Seq: old, Subject: msg.Subject(), Err: err}
	}
	raw, ok := data["upto"]
	if !ok {
		return msg.Data(), nil
	}
	upto, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return nil, &CorruptError{What: "upto of " + e.Type, Seq: old, Subject: msg.Subject(), Err: err}
	}
	of := agent
	if e.Type == TypeForked {
		var f Forked
		if err := json.Unmarshal(e.Data, &f); err != nil || !ValidToken(f.Parent) {
			return msg.Data(), nil // verify reports it; the copy keeps it as it was
		}
		of = f.Parent
	}
	n := mv.remap(chunks, of, Seq(upto))
	data["upto"] = json.RawMessage(strconv.FormatUint(uint64(n), 10))
	if e.Data, err = json.Marshal(data); err != nil {
		return nil, err
	}
	mv.remapped++
	return e.encode()
}

// remap returns the Seq of the sharded layout that takes the place of
// sequence upto of agent's messages of one kind: the copy of that message
// when it was copied; else one before the copy of the agent's first
// message after it (a purged message: what came after it still comes
// after); else the last sequence copied so far into the agent's shard (the
// agent's later messages all come after it).
func (mv *mover) remap(chunks bool, agent string, upto Seq) Seq {
	if upto == 0 {
		return 0
	}
	pairs := mv.maps[chunks][agent]
	i, found := slices.BinarySearchFunc(pairs, upto, func(p movePair, s Seq) int {
		switch {
		case p.old < s:
			return -1
		case p.old > s:
			return 1
		}
		return 0
	})
	switch {
	case found:
		return pairs[i].new
	case i < len(pairs):
		return pairs[i].new - 1
	}
	stream := mv.l.streamFor(agent, chunks)
	return shardSeq(mv.l.shardOfAgent(agent), mv.next[stream]-1)
}
