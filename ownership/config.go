package ownership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Config.
const (
	DefaultBucket = "FOREVER_LEASES"
	// DefaultPartitionsBucket holds what must outlive the leases: the
	// cluster's partition count and each partition's epoch counter.
	DefaultPartitionsBucket = "FOREVER_PARTITIONS"
	// PartitionsKey is the key, in the partitions bucket (in the lease
	// bucket before it existed), of the cluster's partition count, stored
	// when the cluster first starts.
	PartitionsKey     = keyPartitions
	DefaultPartitions = 64
	DefaultTTL        = 10 * time.Second
	// DefaultWarmWait is the least WarmWait by default: longer than a
	// restarted node takes to be ready (6-16 s in the 6-node chaos runs,
	// where a stream it follows may be electing), so its partitions come
	// to it warm rather than at a bound that ran out first.
	DefaultWarmWait = 30 * time.Second
	// DefaultDrainWait is DrainWait's default: a live node catches a
	// partition's views up in well under a second (bench -run handoff),
	// and a stop must fit its grace period.
	DefaultDrainWait = 5 * time.Second
	// BucketElection is the longest a replicated lease bucket goes
	// without a leader once its leader dies: nats-server's longest
	// election timeout (9 s in 2.15.2), counted from the last heartbeat
	// its followers had (1 s apart). The default election grace covers it.
	BucketElection = 10 * time.Second
)

// Errors.
var (
	// ErrPartitionMismatch: the cluster was created with another partition
	// count than this node's.
	ErrPartitionMismatch = errors.New("ownership: partition count differs from the cluster's")
	// ErrShardsMismatch: the cluster was created with another shard count
	// than this node's (Config.Shards).
	ErrShardsMismatch = errors.New("ownership: shard count differs from the cluster's")
	// ErrLeaseExpired is the cause of a partition context cancelled because
	// the lease was not renewed in time.
	ErrLeaseExpired = errors.New("ownership: lease expired before it was renewed")
	// ErrLeaseLost is the cause of a partition context cancelled because
	// another node holds the lease now (a renewal or check conflicted).
	ErrLeaseLost = errors.New("ownership: lease lost to another node")
	// ErrHandoff is the cause of a partition context cancelled because the
	// partition is handed to another node, or this node is stopping.
	ErrHandoff = errors.New("ownership: partition handed off")
	// ErrBucketLost is the cause of a partition context cancelled because
	// the lease bucket was deleted or purged under the node (RestoreBucket).
	ErrBucketLost = errors.New("ownership: the lease bucket was lost")
)

// Config configures a Manager.
type Config struct {
	// Conn is the NATS connection (required).
	Conn *nats.Conn
	// Bucket is the KV bucket of the leases. Default DefaultBucket.
	Bucket string
	// PartitionsBucket is the KV bucket, on file storage, of the partition
	// count and the epoch counters. Default DefaultPartitionsBucket.
	PartitionsBucket string
	// Node names this node, unique in the cluster (required). A node that
	// restarts under the same name takes its old leases back at once.
	Node string
	// Partitions is the partition count. Default DefaultPartitions.
	Partitions int
	// Shards is the shard count of the cluster's log (eventlog's
	// Config.Shards), stored beside the partition count when the cluster
	// is created and compared as it is on every later start
	// (ErrShardsMismatch). 0, and the count of a cluster created before
	// shards, is the unsharded layout. Partitions must be a multiple.
	Shards int
	// ShardsFormat, with Shards, is the record format a cluster created
	// with shards starts at: a release that cannot read it refuses to
	// join (ErrFormatTooNew), so it never writes the unsharded layout
	// beside the shards. At most Format.
	ShardsFormat int
	// AdoptShards takes the shard count the cluster stored instead of
	// refusing another (ErrShardsMismatch): Shards is then only the count
	// a new cluster is created with, and a node started without a count
	// joins the cluster's layout, reading ShardsFormat when that count is
	// above 0. A cluster created before shards (no count stored) has 0.
	// Shards returns the count taken.
	AdoptShards bool
	// TTL is the lease and node-key TTL. Default DefaultTTL; at least 1s.
	TTL time.Duration
	// Margin is how long before the server expires a lease its holder stops
	// serving it. Default TTL/5.
	Margin time.Duration
	// RenewEvery is the renewal period. Default TTL/4.
	RenewEvery time.Duration
	// ElectionGrace is how long past its deadline (TTL minus Margin after
	// its last renewal) a holder keeps serving a lease while its renewals
	// fail without a conflict and it keeps retrying them: the lease
	// bucket electing a leader (BucketElection at most), when nobody can
	// take the lease either. Lease and node keys live on the server for
	// TTL plus ElectionGrace, so a live holder's keys outlast the election
	// too (see doc.go). Default TTL/2, and with Replicas above 1 at least
	// what a lease renewed a RenewEvery before its bucket's leader died
	// needs past its deadline to outlast a BucketElection: with a short
	// TTL (3 s: 8.35 s) TTL/2 would end before the election does, and
	// every node would lose every lease to it.
	ElectionGrace time.Duration
	// Replicas of the bucket. Default 1.
	Replicas int
	// FileStorage keeps a new bucket on JetStream's file store. By default
	// it is kept in the memory store, so that data filling the file store
	// never stops lease renewals (see bucket.go). A bucket that exists
	// keeps its storage.
	FileStorage bool

	// HandoffTimeout bounds the wait for Serve to return when a partition is
	// handed off; the key is deleted after it either way. Default TTL.
	HandoffTimeout time.Duration
	// Serve runs for every acquired partition, in its own goroutine, until
	// ctx is cancelled; it must stop everything it started for the partition
	// before it returns. Nil waits for ctx.
	Serve func(ctx context.Context, l Lease)
	// Prepare, when set, runs for every partition assigned to this node
	// while another live node holds it, in its own goroutine, until ctx is
	// cancelled: once this node is neither assigned the partition nor
	// holds it (warm.go). It calls warm once this node could serve the
	// partition at once (agentd: its views caught it up); the node
	// announces that, and the holder hands the partition off then, or
	// WarmWait after it was first due. Nil: the node announces nothing,
	// and holders hand its partitions off at once.
	Prepare func(ctx context.Context, p int, warm func())
	// WarmWait bounds how long a holder keeps a partition due to a node
	// that announces warm partitions but not this one yet. Default the
	// longer of TTL and DefaultWarmWait: a node just restarted announces a
	// partition only once its views are ready, which takes its start, and
	// a partition handed over sooner is handed over cold.
	WarmWait time.Duration
	// DrainWait bounds how long a stop waits for the nodes taking this
	// node's partitions to announce them warm (drain.go): each goes as
	// soon as its receiver does, and what is still held then is handed
	// off cold. Default DefaultDrainWait; negative: none, every partition
	// goes cold at once.
	DrainWait time.Duration
	// Format is the highest record format this node's release reads,
	// announced in its node key (format.go). Default FormatBase.
	Format int
	// KeepFormat is the record format from which the assignment keeps
	// every partition with its live holder below the bound
	// (assignKeeping), so a node leaving or joining moves no partition
	// between two nodes that stay: once the cluster's active format
	// reached it. Before, every node assigns from the live nodes alone
	// (assign), as releases before it do: nodes of two releases that
	// assigned differently would hand partitions back and forth. 0:
	// never. At most Format.
	KeepFormat int
	// AutoActivate raises the active format after a heartbeat to the
	// highest every live node reads, up to Format: a rolling upgrade
	// starts writing a release's new records once its last node runs it,
	// without an operator's step. False: only Activate raises it.
	AutoActivate bool
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Registerer receives the forever_ownership_* metrics. Nil: none.
	Registerer prometheus.Registerer
}

func (c *Config) setDefaults() error {
	if c.Conn == nil {
		return errors.New("ownership: Config.Conn is required")
	}
	if c.Node == "" {
		return errors.New("ownership: Config.Node is required")
	}
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	if c.PartitionsBucket == "" {
		c.PartitionsBucket = DefaultPartitionsBucket
	}
	if c.Format < FormatBase {
		c.Format = FormatBase
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.Partitions < 1 {
		return errors.New("ownership: Config.Partitions must be positive")
	}
	if c.Shards < 0 || (c.Shards > 0 && c.Partitions%c.Shards != 0) {
		return fmt.Errorf("ownership: Config.Shards %d must be 0 or divide the partition count %d", c.Shards, c.Partitions)
	}
	if c.KeepFormat > c.Format {
		return fmt.Errorf("ownership: Config.KeepFormat %d is past the format this node reads (%d)", c.KeepFormat, c.Format)
	}
	if c.Shards > 0 && c.ShardsFormat > c.Format {
		return fmt.Errorf("ownership: Config.ShardsFormat %d is past the format this node reads (%d)", c.ShardsFormat, c.Format)
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.TTL < time.Second {
		return errors.New("ownership: Config.TTL must be at least 1s (the server's TTL granularity)")
	}
	if c.Margin == 0 {
		c.Margin = c.TTL / 5
	}
	if c.RenewEvery == 0 {
		c.RenewEvery = c.TTL / 4
	}
	if c.Margin+c.RenewEvery >= c.TTL {
		return errors.New("ownership: Config.Margin plus RenewEvery must be below TTL")
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.ElectionGrace == 0 {
		c.ElectionGrace = defaultGrace(c.TTL, c.RenewEvery, c.Margin, c.Replicas)
	}
	if c.ElectionGrace < 0 {
		return errors.New("ownership: Config.ElectionGrace must not be negative")
	}
	if c.HandoffTimeout == 0 {
		c.HandoffTimeout = c.TTL
	}
	if c.WarmWait == 0 {
		c.WarmWait = max(c.TTL, DefaultWarmWait)
	}
	if c.DrainWait == 0 {
		c.DrainWait = DefaultDrainWait
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// defaultGrace is Config.ElectionGrace's default: TTL/2, and for a
// replicated bucket at least the time from a lease's deadline, when its
// last renewal was sent renew before the bucket's leader died, to the end
// of the longest election (BucketElection after the death).
func defaultGrace(ttl, renew, margin time.Duration, replicas int) time.Duration {
	grace := ttl / 2
	if replicas > 1 {
		grace = max(grace, BucketElection-(ttl-margin-renew))
	}
	return grace
}
