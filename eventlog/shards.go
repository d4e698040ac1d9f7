package eventlog

import (
	"hash/fnv"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
)

// Shards. With Config.Shards K > 0 the log is sharded: an agent's events
// are on <prefix>.evt.<p>.<agent> and its chunks on
// <prefix>.chunk.<p>.<agent>.<stream>, p the agent's partition (FNV-1a of
// its id modulo Config.Partitions, as package ownership computes it), in
// the streams <EventsStream>_<k> and <ChunksStream>_<k> of shard
// k = p mod K, each its own Raft group. Everything of one agent is in one
// shard, so its sequences, its fencing and its reads involve one stream;
// only views and whole-log reads visit every shard.
//
// A Seq names its shard: shard k's stream sequence s is k<<SeqShardShift | s
// (see ShardOf). Shard 0, and an unsharded log, keep the stream sequence as
// it is. So one agent's sequences still grow, a cursor is still one number
// (below 2^53, as JSON numbers are exact), and read-your-writes waits for
// the shard the sequence names.
const (
	// SeqShardShift is where a Seq's shard starts: a shard holds at most
	// 2^40 messages in its life.
	SeqShardShift = 40
	// MaxShards is the most shards a log may have: every Seq stays below
	// 2^53.
	MaxShards = 1 << (53 - SeqShardShift - 1)
	// SeqEnds is LastSeq of a whole sharded log (every agent's events, or
	// every chunk): no one sequence is the end of several streams, so it
	// stands for "the last event of each shard", which WaitFor of a
	// Follower reads when it is asked for it, and which a whole-log Read
	// takes as no bound.
	SeqEnds Seq = 1<<53 - 1
)

// seqMask keeps a Seq's stream sequence.
const seqMask = 1<<SeqShardShift - 1

// ShardOf returns the shard a Seq of a sharded log names (0 for an
// unsharded log's), and its sequence in that shard's stream.
func ShardOf(s Seq) (shard int, streamSeq uint64) {
	return int(uint64(s) >> SeqShardShift), uint64(s) & seqMask
}

// rawSeq is s's sequence in its stream, as JetStream takes it.
func rawSeq(s Seq) uint64 { return uint64(s) & seqMask }

// shardSeq is the Seq of sequence raw of shard k.
func shardSeq(k int, raw uint64) Seq { return Seq(uint64(k)<<SeqShardShift | raw) }

// PartitionOf returns agent's partition among n: FNV-1a of the id modulo
// n, the function package ownership leases partitions by.
func PartitionOf(agent string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(agent))
	return int(h.Sum32() % uint32(n))
}

// ShardStreamName is the name of shard k's stream of the stream base.
func ShardStreamName(base string, k int) string { return base + "_" + strconv.Itoa(k) }

// handle is one JetStream stream of the log and what is kept per stream:
// its group commit and its measured send costs.
type handle struct {
	st     jetstream.Stream
	name   string
	shard  int
	chunks bool
	commit committer
	cost   sendCost
}

// sharded reports whether the log has the partition in its subjects and
// a stream per shard.
func (l *Log) sharded() bool { return l.cfg.Shards > 0 }

// Shards returns the log's shard count; 0 for the unsharded layout (one
// events and one chunks stream, no partition in the subjects).
func (l *Log) Shards() int { return l.cfg.Shards }

// Partitions returns the partition count a sharded log places agents by.
func (l *Log) Partitions() int { return l.cfg.Partitions }

// streamFor returns the name of the stream that holds agent's events (or,
// with chunks, its chunks).
func (l *Log) streamFor(agent string, chunks bool) string {
	base := l.cfg.EventsStream
	if chunks {
		base = l.cfg.ChunksStream
	}
	if !l.sharded() {
		return base
	}
	return ShardStreamName(base, l.shardOfAgent(agent))
}

// shardOfAgent returns the shard of agent's partition.
func (l *Log) shardOfAgent(agent string) int {
	return PartitionOf(agent, l.cfg.Partitions) % l.cfg.Shards
}

// partToken is the subject token of agent's partition, with its trailing
// dot; empty for an unsharded log.
func (l *Log) partToken(agent string) string {
	if !l.sharded() {
		return ""
	}
	return strconv.Itoa(PartitionOf(agent, l.cfg.Partitions)) + "."
}

// streamNames returns the names of the streams of one kind, in shard
// order.
func (l *Log) streamNames(chunks bool) []string {
	base := l.cfg.EventsStream
	if chunks {
		base = l.cfg.ChunksStream
	}
	if !l.sharded() {
		return []string{base}
	}
	out := make([]string, l.cfg.Shards)
	for k := range out {
		out[k] = ShardStreamName(base, k)
	}
	return out
}

// EventsStreams returns the names of the streams of the agents' events:
// EventsStream alone for an unsharded log, else one per shard in shard
// order. The caller owns the slice.
func (l *Log) EventsStreams() []string { return l.streamNames(false) }

// ChunksStreams is EventsStreams for the chunks.
func (l *Log) ChunksStreams() []string { return l.streamNames(true) }

// shardSubjects returns the subjects of shard k's stream of one kind.
func (l *Log) shardSubjects(k int, chunks bool) []string {
	kind := ".evt."
	if chunks {
		kind = ".chunk."
	}
	var out []string
	for p := k; p < l.cfg.Partitions; p += l.cfg.Shards {
		out = append(out, l.cfg.Prefix+kind+strconv.Itoa(p)+".>")
	}
	return out
}

// seqOf returns the Seq of stream sequence raw in the stream called name.
func (l *Log) seqOf(name string, raw uint64) Seq {
	if h := l.handles[name]; h != nil && h.shard > 0 {
		return shardSeq(h.shard, raw)
	}
	return Seq(raw)
}

// handleOf returns the handle of the stream called name, nil for none.
func (l *Log) handleOf(name string) *handle { return l.handles[name] }

// Stream metadata keys of a sharded log's streams: what a client binding
// to them learns the layout from.
const (
	metaShards     = "forever_shards"
	metaPartitions = "forever_partitions"
)
