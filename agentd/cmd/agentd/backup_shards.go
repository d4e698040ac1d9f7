package main

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/backup"
	"github.com/forever-agents/forever/ownership"
)

// A backup keeps its cluster's shard count (Manifest.Shards) beside the
// partition count; its shard streams are among the account's streams. A
// restore refuses a target that stored another count, and records the
// backup's in a target that stored none (a new data dir, a cluster no
// node started on), so that a node started there with another --shards
// is refused instead of creating its streams beside the restored ones.

// backupShards reads the shard count the cluster of nc stored.
func backupShards(ctx context.Context, nc *nats.Conn) (int, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	l, err := ownership.ReadLayout(ctx, js)
	return l.Shards, err
}

// checkLayout refuses a target whose stored partition or shard count is
// not the backup's; fresh reports a target that stored none.
func checkLayout(ctx context.Context, nc *nats.Conn, m *backup.Manifest) (fresh bool, err error) {
	if err := checkPartitions(ctx, nc, m); err != nil {
		return false, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return false, err
	}
	l, err := ownership.ReadLayout(ctx, js)
	if err != nil {
		return false, err
	}
	if l.Partitions == 0 {
		return true, nil
	}
	if l.Shards != m.Shards {
		return false, fmt.Errorf("the backup's cluster had %s and the target has %s: start the target's agentd with --shards %d on a new data dir",
			shardsWord(m.Shards), shardsWord(l.Shards), max(m.Shards, 1))
	}
	return false, nil
}

func shardsWord(n int) string {
	if n == 0 {
		return "no shards"
	}
	return fmt.Sprintf("%d shards", n)
}

// recordLayout records the backup's partition and shard counts (and the
// record format of shards) in a target that stored none.
func recordLayout(ctx context.Context, nc *nats.Conn, m *backup.Manifest, replicas int) error {
	if m.Partitions == 0 {
		return nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	format := 0
	if m.Shards > 0 {
		format = agentd.FormatShards
	}
	return ownership.RecordShards(ctx, js, max(replicas, 1), m.Partitions, m.Shards, format)
}
