package agentd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/kvlock"
	"github.com/forever-agents/forever/ownership"
)

// Moving a cluster into shards (agentd shards move). The move is offline:
// it runs while no node of the cluster runs, over the NATS of the cluster
// (--server) or the embedded store of a stopped node's data dir (--data).
// It copies the log into the shard streams (eventlog.MoveToShards), then
// records the shard count and raises the record format to FormatShards in
// the partitions bucket, the commit point: from then on a node of the old
// layout is refused at start, whatever its release (ownership's
// ErrShardsMismatch, ErrFormatTooNew), and the unsharded streams are
// deleted. A move stopped part way is finished by running it again. Each
// node's views, built from the unsharded streams, are rebuilt from the
// shards at its next start (eventlog drops the views of the other layout).
//
// One move of a cluster runs at a time: a move holds a lock, the key
// shardsMoveLockKey in the cluster's lease bucket (internal/kvlock),
// created with a TTL of shardsMoveLockTTL and renewed while it runs; a
// second move is refused (ErrShardsMoveRunning), naming the first's host
// and process. A move that dies lets go within the TTL. (On --data, the
// data dir's Pebble lock already keeps a second process out.)

// shardsMoveLockKey is the key of a move's lock in the lease bucket; its
// value names the move's host and process and when it began.
const shardsMoveLockKey = "shards-move"

// shardsMoveLockTTL is how long a move's lock outlives its last renewal
// (every third of it).
const shardsMoveLockTTL = 30 * time.Second

// ErrShardsMoveRunning is returned by MoveToShards while another move of
// the cluster runs (it holds the move's lock); the message names it.
var ErrShardsMoveRunning = errors.New("agentd: a shards move of this cluster runs")

// ErrNodesRunning is returned by MoveToShards while a node of the cluster
// runs: the move needs the cluster stopped.
var ErrNodesRunning = errors.New("agentd: nodes of the cluster are running")

// ShardsMove is what MoveToShards did.
type ShardsMove struct {
	eventlog.MoveReport
	// Shards and Partitions are the cluster's layout after the move.
	Shards, Partitions int
	// Finished is set when the data was already moved and the move only
	// finished it (deleted the unsharded streams a stopped move left).
	Finished bool
}

// MoveToShards moves the agents of the stopped cluster of nc's account
// from the unsharded streams into shards streams of each kind. partitions
// is the partition count to record when none is stored (a cluster last
// run by a release that kept it in the lease bucket, gone with it); the
// stored count wins. Errors: ErrConfig for a bad shard count;
// ErrShardsMoveRunning; ErrNodesRunning; eventlog.ErrNothingToMove;
// JetStream's.
func MoveToShards(ctx context.Context, nc *nats.Conn, shards, partitions int, logger *slog.Logger) (ShardsMove, error) {
	return moveToShards(ctx, nc, shards, partitions, logger, nil)
}

// moveToShards is MoveToShards; locked, when set (tests), runs once the
// move holds its lock.
func moveToShards(ctx context.Context, nc *nats.Conn, shards, partitions int, logger *slog.Logger, locked func()) (out ShardsMove, err error) {
	if logger == nil {
		logger = slog.Default()
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return ShardsMove{}, err
	}
	ctx, unlock, err := lockShardsMove(ctx, js)
	if err != nil {
		return ShardsMove{}, err
	}
	defer func() {
		unlock()
		if cause := context.Cause(ctx); err != nil && ctx.Err() != nil && cause != nil && !errors.Is(err, cause) {
			err = fmt.Errorf("%w (%w)", err, cause) // the lock lost: say why the move stopped
		}
	}()
	if locked != nil {
		locked()
	}
	layout, err := ownership.ReadLayout(ctx, js)
	if err != nil {
		return ShardsMove{}, err
	}
	if layout.Partitions > 0 {
		partitions = layout.Partitions
	}
	cfg := Config{Shards: shards, Partitions: partitions}
	if shards < 2 {
		return ShardsMove{}, configErrorf("shards", "shards %d: a move needs at least 2", shards)
	}
	if err := cfg.validateShards(); err != nil {
		return ShardsMove{}, err
	}
	if reads := cfg.recordFormat(); layout.Format > reads {
		return ShardsMove{}, fmt.Errorf("%w: the cluster writes record format %d and this release reads up to %d; move it with the release it runs",
			ownership.ErrFormatTooNew, layout.Format, reads)
	}
	live, err := ownership.LiveNodes(ctx, js)
	if err != nil {
		return ShardsMove{}, err
	}
	if len(live) > 0 {
		return ShardsMove{}, fmt.Errorf("%w: %s; stop every node first (a node that crashed counts for a lease TTL)",
			ErrNodesRunning, strings.Join(live, ", "))
	}
	lcfg := eventlog.Config{Conn: nc, Shards: shards, Partitions: partitions, Logger: logger}
	out = ShardsMove{Shards: shards, Partitions: partitions}
	switch layout.Shards {
	case 0:
	case shards:
		// Recorded: a move that stopped before its last step.
		out.Finished = true
		return out, eventlog.FinishMove(ctx, lcfg)
	default:
		return ShardsMove{}, configErrorf("shards", "the cluster has %d shards: a move takes an unsharded cluster into shards, not one shard count to another", layout.Shards)
	}
	st, err := js.Stream(ctx, eventlog.DefaultEventsStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return ShardsMove{}, fmt.Errorf("%w: no %s stream (has agentd ever run here?)", eventlog.ErrNothingToMove, eventlog.DefaultEventsStream)
	}
	if err != nil {
		return ShardsMove{}, err
	}
	lcfg.Replicas = max(st.CachedInfo().Config.Replicas, 1)
	logger.Info("moving the log into shards", "shards", shards, "partitions", partitions, "replicas", lcfg.Replicas)
	if out.MoveReport, err = eventlog.MoveToShards(ctx, lcfg); err != nil {
		return ShardsMove{}, err
	}
	if err := ownership.RecordShards(ctx, js, lcfg.Replicas, partitions, shards, FormatShards); err != nil {
		return ShardsMove{}, err
	}
	logger.Info("shard count and record format recorded: nodes of the old layout are refused", "shards", shards, "format", FormatShards)
	return out, eventlog.FinishMove(ctx, lcfg)
}

// lockShardsMove takes the move's lock in the lease bucket of js's
// account (creating the bucket as a node does when a stopped cluster lost
// it), for this host and process. It returns the context the move runs
// under, cancelled when a renewal fails, and unlock.
func lockShardsMove(ctx context.Context, js jetstream.JetStream) (context.Context, func(), error) {
	kv, err := ownership.OpenLeaseBucket(ctx, js, 1)
	if err != nil {
		return nil, nil, err
	}
	hostname, _ := os.Hostname()
	holder := fmt.Sprintf("agentd shards move on %s (pid %d)", cmp.Or(hostname, "?"), os.Getpid())
	lctx, unlock, err := kvlock.Take(ctx, js, kv, shardsMoveLockKey, holder, shardsMoveLockTTL)
	var held *kvlock.HeldError
	if errors.As(err, &held) {
		return nil, nil, fmt.Errorf("%w: %s; wait for it to end (a move that died lets go within %s)", ErrShardsMoveRunning, held.Holder, shardsMoveLockTTL)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("agentd: take the shards move's lock: %w", err)
	}
	return lctx, unlock, nil
}
