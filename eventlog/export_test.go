package eventlog

import (
	"context"
	"errors"
	"strconv"

	"github.com/cockroachdb/pebble/v2"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// The heartbeats a views follow's and a client follow's pulls ask for:
// one, followHeartbeat.
const (
	ViewsHeartbeat  = followHeartbeat
	FollowHeartbeat = followHeartbeat
)

// StoredCursor reads a projection's committed cursor straight from Pebble.
func StoredCursor(l *Log, name string) (Seq, error) {
	b, err := get(l.db, append(projPrefix(name), 'c'))
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	v, err := decodeUint("cursor", b)
	return Seq(v), err
}

// ForceSend fixes how l sends a group of 2 or more messages: "atomic"
// batches, "pipelined" chains, or "" (by the measured costs).
func ForceSend(l *Log, how string) {
	f := map[string]int{"atomic": 1, "pipelined": -1}[how]
	for _, h := range l.handles {
		h.cost.force = f
	}
}

// HoldAppends makes l's single event appends wait as if a send were in
// flight, until release, which sends everything queued (as one group) and
// returns once that send began.
func HoldAppends(l *Log) (queued func() int, release func()) {
	c := &l.handles[l.cfg.EventsStream].commit
	c.mu.Lock()
	c.busy = true
	c.mu.Unlock()
	queued = func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.queue)
	}
	return queued, func() { l.handOff(c) }
}

// OnGroup tells f the message ids of every group of two or more single
// event appends l sends, before it is sent.
func OnGroup(l *Log, f func(ids []string)) {
	c := &l.handles[l.cfg.EventsStream].commit
	c.mu.Lock()
	c.onGroup = f
	c.mu.Unlock()
}

// FlushProjections writes Pebble's memtable to sstables, so later reads go
// to the filesystem.
func FlushProjections(l *Log) error { return l.db.Flush() }

// SkipCommitSync makes l's projection commits unsynced, as a bug would.
func SkipCommitSync(l *Log) { l.syncWAL = false }

// StopCompact makes l's Compact call stop at each crash point.
func StopCompact(l *Log, stop func(point string) error) { l.stopCompact = stop }

// StreamConfig returns the stored config of one of l's streams.
func StreamConfig(l *Log, name string) (jetstream.StreamConfig, error) {
	info, err := l.stream(name).Info(context.Background())
	if err != nil {
		return jetstream.StreamConfig{}, err
	}
	return info.Config, nil
}

// SkipPurgeOnce makes l's next compaction purge remove nothing.
func SkipPurgeOnce(l *Log) { l.skipPurge = true }

// SkewExpect makes every fenced send of l of a message (subject, message
// id) for which refuse returns true expect a last sequence the subject
// does not have: JetStream refuses it with "wrong last sequence" while the
// subject is where the writer left it, as a stream leader that has not
// caught up does during an election. Set it before l is used.
func SkewExpect(l *Log, refuse func(subject, id string) bool) { l.skewExpect = refuse }

// BeforeRead makes l's reads call f once they have the last sequence they
// read up to, before reading.
func BeforeRead(l *Log, f func()) { l.beforeRead = f }

// RefuseLeaderGets makes l's leader reads answered "temporarily
// unavailable" (10008) while refuse returns true.
func RefuseLeaderGets(l *Log, refuse func() bool) { l.refuseLeaderGet = refuse }

// FollowDelivered makes l's follows call f with each event their
// consumer delivers, before they yield it. Set it before l is used.
func FollowDelivered(l *Log, f func(ctx context.Context, e *Event)) { l.followDelivered = f }

// DirectNone makes l's reads find nothing with direct gets while none
// returns true. Set it before l is used.
func DirectNone(l *Log, none func() bool) { l.directNone = none }

// FollowedSince returns the partitions an owned-views log follows and
// their generation, for WaitOwnedSince.
func FollowedSince(l *Log) ([]int, uint64) {
	parts, gen, _ := l.owned.state()
	return parts, gen
}

// WaitOwnedSince is WaitFor of an owned-views Follower that began when
// the followed partitions were parts, of generation gen (FollowedSince).
func WaitOwnedSince(ctx context.Context, f *Follower, seq Seq, parts []int, gen uint64) error {
	return f.waitOwnedSince(ctx, seq, parts, gen)
}

// ShardStarts returns how many times each shard follower of f started
// its consumer (a life from the stored cursors), in shard order.
func ShardStarts(f *Follower) []int {
	out := make([]int, len(f.shards))
	for k, s := range f.shards {
		s.mu.Lock()
		out[k] = s.mu.starts
		s.mu.Unlock()
	}
	return out
}

// PutViewCursor stores cursor as the cursor of view's partition p (an
// owned-views view), as a commit would.
func PutViewCursor(l *Log, view string, p int, cursor uint64) error {
	key := append(append(projPrefix(view), 'c'), "p"+strconv.Itoa(p)...)
	return l.db.Set(key, encodeUint(cursor), pebble.Sync)
}

// FollowPlacement creates a views follow's consumer of stream, as a
// Follower does, and reports where JetStream placed it and whether the
// placement check finds that replica far behind; the consumer is then
// dropped.
func FollowPlacement(ctx context.Context, l *Log, stream string) (server string, behind bool, err error) {
	cons, err := l.orderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return "", false, err
	}
	msgs, err := cons.Messages()
	if err != nil {
		l.dropConsumer(stream, cons)
		return "", false, err
	}
	defer func() {
		msgs.Stop()
		l.dropConsumer(stream, cons)
	}()
	server, behind = l.placedBehind(ctx, stream, cons)
	return server, behind, nil
}

// PlacedBehind makes l's placement checks answer behind(stream) in place
// of the stream's leader, on any log. Set it before l is used.
func PlacedBehind(l *Log, behind func(stream string) bool) { l.placedBehindHook = behind }

// PublishUnanswered publishes one message to subject, which the caller
// receives without answering, as l's write to stream: fenced, with an
// expected last subject sequence (not sent again), or else with a message
// id (sent again). It returns what the write returned.
func PublishUnanswered(ctx context.Context, l *Log, stream, subject string, fenced bool) (Seq, error) {
	m := nats.NewMsg(subject)
	m.Data = []byte("unanswered")
	m.Header.Set(jetstream.MsgIDHeader, nuid.Next())
	var expect *Seq
	if fenced {
		expect = new(Seq)
	}
	return l.publishOne(ctx, m, stream, "test", expect, nil)
}
