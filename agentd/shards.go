package agentd

import (
	"context"
	"time"

	"github.com/forever-agents/forever/eventlog"
)

// FormatShards: the partition is in the subjects and partition p's events
// and chunks are in the streams of shard p mod --shards (eventlog's
// shards). A cluster created with --shards above 1 starts at this format,
// so a release that cannot read the shards never joins it and writes the
// unsharded layout beside them.
const FormatShards = FormatBatches + 1

// FormatChunkBatches: a turn stores the chunks it writes together (queued
// behind a batch being stored) as one packed record (chunk.EventChunks),
// one message where each chunk was one, and replay cursors may point
// inside a record ("<seq>.<k>"). A release before it reads no such record
// (its recovery, replay and verify would miss those chunks), so turns
// pack only once the cluster's active format reached it. It adds no
// layout: whether a cluster is sharded is its stored shard count
// (--shards), never its format.
const FormatChunkBatches = FormatShards + 1

// logShards returns the shard count of the log and of the ownership's
// stored layout: 0 (unsharded) for --shards 0 or 1.
func (c *Config) logShards() int {
	if c.Shards <= 1 {
		return 0
	}
	return c.Shards
}

// logShards returns the shard count the node's log opens with: the
// cluster's, as the lease manager checked or took it (--shards unset).
func (d *Daemon) logShards(cfg *Config) int {
	if d.parts.mgr != nil {
		return d.parts.mgr.Shards()
	}
	return cfg.logShards()
}

// recordFormat is the record format this node announces it reads:
// RecordFormat, which is past FormatShards (a cluster created with shards
// starts at it), so a node reads both layouts' records. An unsharded
// cluster's format passes FormatShards too; its layout stays its stored
// shard count.
func (c *Config) recordFormat() int {
	if c.logShards() > 0 {
		return max(RecordFormat, FormatShards)
	}
	return RecordFormat
}

// ownedViews reports whether a node of a log of shards shards (0:
// unsharded) projects only the partitions it owns: in a sharded cluster,
// unless --owned-views=false (AllViews) or a per-user budget, whose spend
// of a user's agents is read from the node's views (every partition's).
func (c *Config) ownedViews(shards int) bool {
	return shards > 1 && !c.AllViews && c.UserBudget.IsZero()
}

// validateShards checks --shards against --partitions.
func (c *Config) validateShards() error {
	switch {
	case c.Shards < 0:
		return configErrorf("shards", "shards must not be negative")
	case c.Shards > eventlog.MaxShards:
		return configErrorf("shards", "shards %d: at most %d", c.Shards, eventlog.MaxShards)
	case c.Shards > 1 && c.Partitions%c.Shards != 0:
		return configErrorf("shards", "shards %d does not divide the partition count %d: --partitions must be a multiple of --shards", c.Shards, c.Partitions)
	}
	return nil
}

// logStreams returns the names of the log's streams with shards (0 for
// the unsharded layout): each shard's events stream, then each one's
// chunks stream.
func logStreams(shards int) []string {
	if shards == 0 {
		return []string{eventlog.DefaultEventsStream, eventlog.DefaultChunksStream}
	}
	var out []string
	for _, base := range []string{eventlog.DefaultEventsStream, eventlog.DefaultChunksStream} {
		for k := range shards {
			out = append(out, eventlog.ShardStreamName(base, k))
		}
	}
	return out
}

// leaderSpreadEvery is how often the owner of partition 0 spreads the
// shard streams' leaders over the servers (eventlog.Log.SpreadLeaders).
const leaderSpreadEvery = 30 * time.Second

// addLeaderSpread adds, for a replicated sharded log, the component that
// keeps its streams' Raft leaders spread over the servers: the node that
// owns partition 0 checks every leaderSpreadEvery, so one node does it
// and another takes over with the lease, and a server that returned gets
// its share of leaders back at the next check.
func (d *Daemon) addLeaderSpread(lg *eventlog.Log) error {
	if lg.Shards() == 0 || lg.Replicas() < 2 || d.parts.mgr == nil {
		return nil
	}
	return d.Add("shard leaders", ComponentFunc(func(ctx context.Context) error {
		t := time.NewTicker(leaderSpreadEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			if _, _, ok := d.parts.mgr.Owned(0); !ok {
				continue
			}
			if _, err := lg.SpreadLeaders(ctx); err != nil && ctx.Err() == nil {
				d.logger.Warn("spreading the shard streams' leaders", "err", err)
			}
		}
	}))
}
