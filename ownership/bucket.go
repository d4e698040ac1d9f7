package ownership

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The lease bucket is control-plane state: it must keep taking writes when
// the agents' data fills the JetStream store, or every node loses its
// partitions to a full disk. So a new bucket is kept in JetStream's memory
// store (Config.Storage), which the file store's data cannot reach; its
// replicas, R3 in a cluster, keep it across the restart of any node. Only
// the whole cluster stopping at once loses it, which loses nothing the
// leases need: every lease would have expired anyway, and the partition
// count (config.partitions) is written again by the first node to start.
//
// The partition count and the epoch counters (epoch.go) are not leases:
// they live in the partitions bucket, on file storage, which a whole
// cluster stopping keeps. The lease bucket's revisions (the compare-and-set
// of renewals) still never go back: a bucket is created with its first
// sequence at the current time in microseconds, later than every revision
// of an older bucket, which writes far fewer than a million keys a second.

// openBucket creates the lease bucket, or binds and updates it when it
// exists. A bucket that exists keeps its storage (one made on file storage
// by an older version stays there: the storage of a stream cannot change);
// a new one gets memory storage (file with cfg.FileStorage) and its first sequence at max(now in
// microseconds, minSeq). When the server has no memory store (an external
// server with max_mem 0), a new bucket falls back to file storage.
func openBucket(ctx context.Context, js jetstream.JetStream, cfg Config, minSeq uint64) (kv jetstream.KeyValue, created bool, err error) {
	want := jetstream.MemoryStorage
	if cfg.FileStorage {
		want = jetstream.FileStorage
	}
	kvcfg := jetstream.KeyValueConfig{
		Bucket:         cfg.Bucket,
		Description:    "Forever partition leases",
		History:        1,
		Replicas:       cfg.Replicas,
		Storage:        want,
		LimitMarkerTTL: cfg.TTL,
	}
	s, err := js.Stream(ctx, bucketStream(cfg.Bucket))
	switch {
	case err == nil:
		kvcfg.Storage = s.CachedInfo().Config.Storage
		if kvcfg.Storage != want {
			cfg.Logger.Warn("the lease bucket is on file storage: a full JetStream store can stop lease renewals; "+
				"delete it while every node is stopped and the next start makes it in memory",
				"bucket", cfg.Bucket)
		}
		kv, err := js.CreateOrUpdateKeyValue(ctx, kvcfg)
		if err != nil {
			return nil, false, fmt.Errorf("ownership: lease bucket %s: %w", cfg.Bucket, err)
		}
		return kv, false, nil
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, false, fmt.Errorf("ownership: lease bucket %s: %w", cfg.Bucket, err)
	}
	first := max(uint64(time.Now().UnixMicro()), minSeq)
	kv, err = createBucket(ctx, js, kvcfg, first)
	if err != nil && kvcfg.Storage == jetstream.MemoryStorage && insufficient(err) {
		cfg.Logger.Warn("the server has no JetStream memory store for the lease bucket; keeping it on file storage, where a full store can stop lease renewals",
			"bucket", cfg.Bucket, "err", err)
		kvcfg.Storage = jetstream.FileStorage
		kv, err = createBucket(ctx, js, kvcfg, first)
	}
	if err != nil {
		return nil, false, fmt.Errorf("ownership: lease bucket %s: %w", cfg.Bucket, err)
	}
	return kv, true, nil
}

// openPartitionsBucket binds the partitions bucket, creating it on file
// storage when it is missing (created). It holds the partition count and
// the epoch counters, which must outlive the leases: a whole cluster
// stopping loses the lease bucket (memory) but keeps them. It is written
// only when a node first starts and when a partition is acquired, so a
// full store stops acquisitions, which could not write either, never
// renewals.
func openPartitionsBucket(ctx context.Context, js jetstream.JetStream, cfg Config) (kv jetstream.KeyValue, created bool, err error) {
	kv, err = js.KeyValue(ctx, cfg.PartitionsBucket)
	if err == nil {
		return kv, false, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, false, fmt.Errorf("ownership: partitions bucket %s: %w", cfg.PartitionsBucket, err)
	}
	kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      cfg.PartitionsBucket,
		Description: "Forever partition count and epoch counters",
		History:     1,
		Replicas:    cfg.Replicas,
		Storage:     jetstream.FileStorage,
	})
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.KeyValue(ctx, cfg.PartitionsBucket)
		return kv, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("ownership: partitions bucket %s: %w", cfg.PartitionsBucket, err)
	}
	return kv, true, nil
}

// OpenPartitionsBucket binds the account's partitions bucket
// (DefaultPartitionsBucket), creating it as a node does when it is
// missing, with replicas copies: a restore into a new node or cluster
// writes its epoch counters before any node started there.
func OpenPartitionsBucket(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	kv, _, err := openPartitionsBucket(ctx, js, Config{PartitionsBucket: DefaultPartitionsBucket, Replicas: max(replicas, 1)})
	return kv, err
}

// bucketStream is the stream behind a KV bucket.
func bucketStream(bucket string) string { return "KV_" + bucket }

// createBucket creates the bucket's stream as nats.go's CreateKeyValue
// would, with its first sequence at first. A bucket another node created
// meanwhile is bound as it is.
func createBucket(ctx context.Context, js jetstream.JetStream, kvcfg jetstream.KeyValueConfig, first uint64) (jetstream.KeyValue, error) {
	scfg := jetstream.StreamConfig{
		Name:                   bucketStream(kvcfg.Bucket),
		Description:            kvcfg.Description,
		Subjects:               []string{"$KV." + kvcfg.Bucket + ".>"},
		MaxMsgsPerSubject:      int64(kvcfg.History),
		MaxBytes:               -1,
		MaxMsgSize:             -1,
		MaxMsgs:                -1,
		MaxConsumers:           -1,
		Storage:                kvcfg.Storage,
		Replicas:               kvcfg.Replicas,
		AllowRollup:            true,
		DenyDelete:             true,
		Duplicates:             2 * time.Minute,
		AllowDirect:            true,
		Discard:                jetstream.DiscardNew,
		AllowMsgTTL:            true,
		SubjectDeleteMarkerTTL: kvcfg.LimitMarkerTTL,
		FirstSeq:               first,
	}
	if _, err := js.CreateStream(ctx, scfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return nil, err
	}
	return js.KeyValue(ctx, kvcfg.Bucket)
}

// insufficient reports whether err says the server cannot hold the stream
// in the storage asked for.
func insufficient(err error) bool {
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode {
	case 10023, 10028, 10047: // insufficient resources, memory or storage resources exceeded
		return true
	}
	return false
}
