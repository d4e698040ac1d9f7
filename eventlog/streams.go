package eventlog

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
)

// LogStreams is what a client that holds no Log (a bench, the chaos
// tool) learns of the log's streams on the server: unsharded, one events
// and one chunks stream; sharded, one of each per shard, and the shard and
// partition counts their metadata holds.
type LogStreams struct {
	// Shards is 0 for the unsharded layout.
	Shards, Partitions int
	// Events and Chunks are the streams' names, in shard order.
	Events, Chunks []string
}

// ReadStreams reads the layout of the log of js's account, whose streams
// have the default names (DefaultEventsStream, DefaultChunksStream).
// Errors: one wrapping jetstream.ErrStreamNotFound when the account has
// neither layout's events stream; JetStream's.
func ReadStreams(ctx context.Context, js jetstream.JetStream) (LogStreams, error) {
	_, err := js.Stream(ctx, DefaultEventsStream)
	if err == nil {
		return LogStreams{Events: []string{DefaultEventsStream}, Chunks: []string{DefaultChunksStream}}, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return LogStreams{}, fmt.Errorf("eventlog: stream %s: %w", DefaultEventsStream, err)
	}
	st, err := js.Stream(ctx, ShardStreamName(DefaultEventsStream, 0))
	if err != nil {
		return LogStreams{}, fmt.Errorf("eventlog: neither %s nor its shards: %w", DefaultEventsStream, err)
	}
	md := st.CachedInfo().Config.Metadata
	k, _ := strconv.Atoi(md[metaShards])
	p, _ := strconv.Atoi(md[metaPartitions])
	if k < 1 || k > MaxShards || p < 1 || p%k != 0 {
		return LogStreams{}, fmt.Errorf("eventlog: stream %s: bad shard metadata %v", st.CachedInfo().Config.Name, md)
	}
	out := LogStreams{Shards: k, Partitions: p}
	for i := range k {
		out.Events = append(out.Events, ShardStreamName(DefaultEventsStream, i))
		out.Chunks = append(out.Chunks, ShardStreamName(DefaultChunksStream, i))
	}
	return out, nil
}

// EventsOf returns the name of the stream that holds agent's events, and
// ChunksOf that of its chunks.
func (s LogStreams) EventsOf(agent string) string { return s.Events[s.shardOf(agent)] }

// ChunksOf: see EventsOf.
func (s LogStreams) ChunksOf(agent string) string { return s.Chunks[s.shardOf(agent)] }

func (s LogStreams) shardOf(agent string) int {
	if s.Shards == 0 {
		return 0
	}
	return PartitionOf(agent, s.Partitions) % s.Shards
}

// EventsSubject returns the subject of agent's events under prefix (with
// its partition when sharded).
func (s LogStreams) EventsSubject(prefix, agent string) string {
	if s.Shards == 0 {
		return prefix + ".evt." + agent
	}
	return prefix + ".evt." + strconv.Itoa(PartitionOf(agent, s.Partitions)) + "." + agent
}
