package quota

import (
	"context"
	"errors"

	"github.com/forever-agents/forever/eventlog"
	"github.com/nats-io/nats.go/jetstream"
)

// Usage is what a tenant uses of the quotas that count something stored:
// the agents with events, and its account's JetStream use.
type Usage struct {
	// Agents is the number of agents with events in the log (the agents
	// quota counts them).
	Agents int `json:"agents"`
	// Bytes is the account's JetStream file storage (the bytes quota).
	Bytes int64 `json:"bytes"`
	// Memory is the account's JetStream memory storage.
	Memory int64 `json:"memory"`
	// Streams and Consumers are the account's JetStream streams and
	// consumers, agentd's own included. Streams counts a sharded log as
	// the streams quota does: two streams (events, chunks), however many
	// shards it has (ShardStreams).
	Streams   int `json:"streams"`
	Consumers int `json:"consumers"`
}

// ShardStreams is the room a log of shards shards (0 or 1: unsharded)
// takes in an account's streams limit past the streams quota, which
// counts the log as two streams: its shards past the first of each kind,
// 2(shards-1).
func ShardStreams(shards int) int {
	if shards <= 1 {
		return 0
	}
	return 2 * (shards - 1)
}

// ReadUsage reads the usage of the account js belongs to: account info,
// and the events stream's subject count (each shard's, for a sharded
// log: one more request a shard), so cheap enough to poll. A JetStream
// that does not answer is a 503 error.
func ReadUsage(ctx context.Context, js jetstream.JetStream) (Usage, error) {
	info, err := js.AccountInfo(ctx)
	if err != nil {
		return Usage{}, unavailable("usage", err)
	}
	u := Usage{Bytes: int64(info.Store), Memory: int64(info.Memory), Streams: info.Streams, Consumers: info.Consumers}
	streams, sharded, err := eventsStreams(ctx, js)
	if err == nil && len(streams) == 0 {
		err = jetstream.ErrStreamNotFound
	}
	if err != nil {
		return Usage{}, unavailable("usage", err)
	}
	// One subject an agent: <prefix>.evt.<agent>, or
	// <prefix>.evt.<partition>.<agent> in the one shard of its partition.
	for _, s := range streams {
		u.Agents += int(s.CachedInfo().State.NumSubjects)
	}
	if sharded {
		u.Streams = max(u.Streams-ShardStreams(len(streams)), 0)
	}
	return u, nil
}

// eventsStreams returns the log's events streams: the unsharded one, or
// (sharded: when it is missing) every shard's, found by name from shard 0
// up (eventlog.ShardStreamName) until one is missing; none when the log
// has no events stream yet.
func eventsStreams(ctx context.Context, js jetstream.JetStream) ([]jetstream.Stream, bool, error) {
	s, err := js.Stream(ctx, eventlog.DefaultEventsStream)
	if err == nil {
		return []jetstream.Stream{s}, false, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, false, err
	}
	var out []jetstream.Stream
	for k := 0; k < eventlog.MaxShards; k++ {
		s, err := js.Stream(ctx, eventlog.ShardStreamName(eventlog.DefaultEventsStream, k))
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			break
		}
		if err != nil {
			return nil, false, err
		}
		out = append(out, s)
	}
	return out, len(out) > 0, nil
}
