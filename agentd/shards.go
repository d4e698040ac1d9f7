package agentd

import (
	"context"
	"errors"
	"fmt"

	"github.com/forever-agents/forever/eventlog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// FormatEndRecords: a completed turn stores its assistant message and its
// usage in its turn.completed (chat.Config.EndRecordsWritable), where they
// were a message.appended and a usage.recorded of their own: its end chain
// is two records (turn.completed, fiber.completed) where it was four, two
// fsyncs fewer a turn. A release before it reads such a turn as completed
// without an answer or usage (its history, usage and budget views would
// miss them), so turns write it only once the cluster's active format
// reached it. It adds no layout.
const FormatEndRecords = FormatChunkBatches + 1

// FormatAnnouncedSteps: the stash of a turn's step usage before its tools
// carries the op.started of the step's one call of an Idempotent server
// tool (fiber.AnnounceStep, chat.Config.AnnouncedStepsWritable), where it
// was a record of its own: such a tool call awaits two rounds of writes
// (its input with the stash, its result), as a bare fiber.Step, where it
// awaited three. A release before it reads no announcement in a stash: its
// recovery would run the call as a new op (the same idempotency key, so
// harmless) and its verify would report the op completed without
// op.started, so turns write it only once the cluster's active format
// reached it. It adds no layout.
const FormatAnnouncedSteps = FormatEndRecords + 1

// FormatKeptPartitions: the partition assignment keeps every partition
// with its live holder below the bound (ownership.Config.KeepFormat), so
// a node's death moves only its own partitions, none between two nodes
// that stay (where each such move was a handoff that stalled its agents
// for 0.1-4 s). It adds no record: it switches on through the format
// because nodes that assigned differently would hand partitions back and
// forth, and a release before it assigns from the live nodes alone.
const FormatKeptPartitions = FormatAnnouncedSteps + 1

// FormatInlineEnds: a completed turn's turn.completed carries its fiber's
// end (eventlog.Event.Completes, fiber.CompleteIn,
// chat.Config.InlineEndsWritable), where a fiber.completed of its own
// followed it: a turn's end chain is one record, one fsync fewer a turn.
// A release before it reads such a turn.completed as the turn's outcome
// alone: its runs view would keep the fiber as running, and its recovery
// would end it again. So turns write it only once the cluster's active
// format reached it. It adds no layout.
const FormatInlineEnds = FormatKeptPartitions + 1

// DefaultShards is the shard count a new cluster is created with when
// its nodes are started without --shards and its streams are on a
// cluster of servers (replicated, or an embedded server with
// --cluster-listen): with the default 64 partitions, 8 shards of each kind
// are 16 Raft leaders, which SpreadLeaders gives 6/5/5 to 3 servers and
// 3/3/3/3/2/2 to 6 (docs/scaling.md, "Choosing P, K and the node
// count"). With --partitions that 8 does not divide, the default is the
// largest power of 2 that divides both (1: unsharded). A single server
// gets no default: its streams have no leaders to spread.
const DefaultShards = 8

// newClusterShards returns the shard count a node started without
// --shards creates a new cluster with: DefaultShards (see there) when
// the log is on a cluster of servers (clustered, as replicasFor found),
// 0 (unsharded) on a single server. A cluster that stored its count keeps
// it (ownership's AdoptShards), whatever this returns.
func (c *Config) newClusterShards(clustered bool) int {
	if !clustered {
		return 0
	}
	k := DefaultShards
	for k > 1 && c.Partitions%k != 0 {
		k /= 2
	}
	if k <= 1 {
		return 0
	}
	return k
}

// creationShards returns the shard count this node would create a new
// cluster with: --shards above 1, else (no flag) newClusterShards (a
// tenant's daemon: its node's, TenantLink.Shards), unless
// the unsharded events stream already exists in the node's account: a
// log created without a stored count (before the partitions bucket, or
// by hand) keeps its layout, so no data moves by surprise.
func (c *Config) creationShards(ctx context.Context, nc *nats.Conn) (int, error) {
	if c.Shards != 0 {
		return c.logShards(), nil
	}
	k := c.newClusterShards(c.Replicas > 1 || c.clustered())
	if c.Tenant != nil {
		// A tenant's log takes its node's layout (TenantLink.Shards).
		k = 0
		if c.Tenant.Shards > 1 {
			k = c.Tenant.Shards
		}
	}
	if k == 0 {
		return 0, nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	switch _, err := js.Stream(ctx, eventlog.DefaultEventsStream); {
	case err == nil:
		return 0, nil
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return k, nil
	default:
		return 0, fmt.Errorf("look for the unsharded events stream: %w", err)
	}
}

// logShards returns the shard count of the log and of the ownership's
// stored layout: 0 (unsharded) for --shards 0 or 1.
func (c *Config) logShards() int {
	if c.Shards <= 1 {
		return 0
	}
	return c.Shards
}

// Shards returns the shard count of the node's log once it started: the
// cluster's, as the lease manager checked or took it (0: unsharded).
// Before the start it is the count of --shards (0 when unset).
// It may be called from any goroutine.
func (d *Daemon) Shards() int {
	if mgr := d.parts.ready.Load(); mgr != nil {
		return mgr.Shards()
	}
	return d.cfg.logShards()
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
