package ownership

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
)

// keyShards is the shard count's key in the partitions bucket; absent
// means a cluster created before shards: 0, the unsharded layout.
const keyShards = "config.shards"

// ShardsKey is the key, in the partitions bucket, of the cluster's shard
// count.
const ShardsKey = keyShards

// createShards stores the shard count of a new cluster and, when it has
// shards, starts its record format at Config.ShardsFormat. A count
// stored meanwhile by another node is kept (and compared by checkShards).
func (m *Manager) createShards(ctx context.Context) error {
	_, err := m.parts.Create(ctx, keyShards, []byte(strconv.Itoa(m.cfg.Shards)))
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ownership: store the shard count: %w", err)
	}
	if m.cfg.Shards > 0 && m.cfg.ShardsFormat > FormatBase {
		_, err := m.parts.Create(ctx, keyFormat, []byte(strconv.Itoa(m.cfg.ShardsFormat)))
		if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("ownership: store the record format of the shards: %w", err)
		}
		m.log.Info("cluster created with shards", "shards", m.cfg.Shards, "format", m.cfg.ShardsFormat)
	}
	return nil
}

// storedShards returns the cluster's shard count: 0 when none is stored.
func (m *Manager) storedShards(ctx context.Context) (int, error) {
	n, _, err := storedInt(ctx, m.parts, keyShards, "shard count", "count", 0)
	return n, err
}

// checkShards refuses a node started with another shard count than the
// cluster's.
func (m *Manager) checkShards(ctx context.Context) error {
	got, err := m.storedShards(ctx)
	if err != nil {
		return err
	}
	if got != m.cfg.Shards && m.cfg.AdoptShards {
		m.cfg.Shards = got
		if got > 0 {
			m.cfg.Format = max(m.cfg.Format, m.cfg.ShardsFormat)
		}
		m.log.Info("started without a shard count: taking the cluster's", "shards", got)
		return nil
	}
	if got != m.cfg.Shards {
		what := func(n int) string {
			if n == 0 {
				return "no shards (the unsharded layout)"
			}
			return strconv.Itoa(n) + " shards"
		}
		return fmt.Errorf("%w: the cluster has %s and this node was started with %s; start it with the cluster's count",
			ErrShardsMismatch, what(got), what(m.cfg.Shards))
	}
	return nil
}

// Shards returns the cluster's shard count (Config.Shards, which New
// checked against the stored one, or took from it with AdoptShards).
func (m *Manager) Shards() int { return m.cfg.Shards }
