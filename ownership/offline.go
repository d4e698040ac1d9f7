package ownership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// What a tool that changes a stopped cluster's stored data (agentd shards
// move) reads and records, without being a node: it takes no lease and
// writes no node key.

// Layout is a cluster's stored layout, as its nodes check it at start.
type Layout struct {
	// Partitions is the stored partition count, 0 when none is stored.
	Partitions int
	// Shards is the stored shard count, 0 for the unsharded layout.
	Shards int
	// Format is the active record format (FormatBase when none is set).
	Format int
}

// ReadLayout reads the stored layout of the cluster of js's account: from
// the partitions bucket (DefaultPartitionsBucket), and the partition
// count from the lease bucket where an older release stored it. A cluster
// that never started has the zero Layout but Format FormatBase.
func ReadLayout(ctx context.Context, js jetstream.JetStream) (Layout, error) {
	out := Layout{Format: FormatBase}
	kv, err := js.KeyValue(ctx, DefaultPartitionsBucket)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
	case err != nil:
		return Layout{}, fmt.Errorf("ownership: partitions bucket: %w", err)
	default:
		m := &Manager{parts: kv}
		if out.Shards, err = m.storedShards(ctx); err != nil {
			return Layout{}, err
		}
		if out.Format, _, err = m.activeFormat(ctx); err != nil {
			return Layout{}, err
		}
		if out.Partitions, err = storedCount(ctx, kv); err != nil {
			return Layout{}, err
		}
	}
	if out.Partitions == 0 {
		leases, err := js.KeyValue(ctx, DefaultBucket)
		switch {
		case errors.Is(err, jetstream.ErrBucketNotFound):
		case err != nil:
			return Layout{}, fmt.Errorf("ownership: lease bucket: %w", err)
		default:
			if out.Partitions, err = storedCount(ctx, leases); err != nil {
				return Layout{}, err
			}
		}
	}
	return out, nil
}

// storedCount reads the partition count of kv, 0 when it has none.
func storedCount(ctx context.Context, kv jetstream.KeyValue) (int, error) {
	n, _, err := storedInt(ctx, kv, keyPartitions, "partition count", "count", 1)
	return n, err
}

// LiveNodes returns the names of the nodes whose heartbeat key is in the
// lease bucket, sorted: a node's key is written at each heartbeat, expires
// a lease TTL after the last one, and is deleted when the node stops
// cleanly. None when the bucket does not exist.
func LiveNodes(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	kv, err := js.KeyValue(ctx, DefaultBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ownership: lease bucket: %w", err)
	}
	keys, err := kv.ListKeysFiltered(ctx, prefixNode+">")
	if err != nil {
		return nil, fmt.Errorf("ownership: list the node keys: %w", err)
	}
	var out []string
	for k := range keys.Keys() {
		if name, ok := strings.CutPrefix(k, prefixNode); ok {
			out = append(out, name)
		}
	}
	_ = keys.Stop() // done: the lister ended with the last key
	slices.Sort(out)
	return out, nil
}

// OpenLeaseBucket binds the lease bucket (DefaultBucket) of js's
// account, creating it as a node does when it is missing (memory storage,
// with replicas copies, its delete markers kept DefaultTTL): a tool that
// changes a stopped cluster's data (agentd shards move) takes its lock
// there, and a whole cluster stopping may have lost the bucket. A bucket
// that exists is bound as it is, its configuration untouched.
func OpenLeaseBucket(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, DefaultBucket)
	if err == nil || !errors.Is(err, jetstream.ErrBucketNotFound) {
		if err != nil {
			return nil, fmt.Errorf("ownership: lease bucket: %w", err)
		}
		return kv, nil
	}
	kv, _, err = openBucket(ctx, js, Config{Bucket: DefaultBucket, Replicas: max(replicas, 1), TTL: DefaultTTL, Logger: slog.Default()}, 0)
	return kv, err
}

// RecordShards records, while no node runs, that the cluster's data is in
// shards streams of each kind (after a move into them): the shard count,
// the partition count when none is stored, and the active record format
// raised to format when it is lower (a format never goes back). From then
// on a node started with another shard count is refused
// (ErrShardsMismatch), and one of a release that cannot read format too
// (ErrFormatTooNew): no writer of the old layout starts.
func RecordShards(ctx context.Context, js jetstream.JetStream, replicas, partitions, shards, format int) error {
	kv, err := OpenPartitionsBucket(ctx, js, replicas)
	if err != nil {
		return err
	}
	if _, err := kv.Create(ctx, keyPartitions, []byte(strconv.Itoa(partitions))); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("ownership: store the partition count: %w", err)
	}
	if _, err := kv.Put(ctx, keyShards, []byte(strconv.Itoa(shards))); err != nil {
		return fmt.Errorf("ownership: store the shard count: %w", err)
	}
	m := &Manager{parts: kv}
	active, rev, err := m.activeFormat(ctx)
	if err != nil || active >= format {
		return err
	}
	v := []byte(strconv.Itoa(format))
	if rev == 0 {
		_, err = kv.Create(ctx, keyFormat, v)
	} else {
		_, err = kv.Update(ctx, keyFormat, v, rev)
	}
	if err != nil {
		return fmt.Errorf("ownership: raise the record format to %d: %w", format, err)
	}
	return nil
}
