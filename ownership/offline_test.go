package ownership

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/nats-io/nats.go/jetstream"
)

// A move's tool sees the live nodes (none once they stopped), reads the
// stored layout, and RecordShards makes every node of the old layout
// refuse: one of this release without the shard count, one of a release
// that cannot read the format; a node with the recorded count starts, and
// one that adopts the stored count (AdoptShards) takes it.
func TestRecordShardsFencesTheOldLayout(t *testing.T) {
	ctx := t.Context()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	js, err := jetstream.New(eventlogtest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	a := startNode(t, s, Config{Node: "a", Partitions: 8, Format: 5, ShardsFormat: 6})
	if live, err := LiveNodes(ctx, js); err != nil || !slices.Equal(live, []string{"a"}) {
		t.Fatalf("live nodes %v, %v", live, err)
	}
	a.stop(t)
	if live, err := LiveNodes(ctx, js); err != nil || len(live) != 0 {
		t.Fatalf("live nodes after the stop: %v, %v", live, err)
	}
	if l, err := ReadLayout(ctx, js); err != nil || l != (Layout{Partitions: 8, Shards: 0, Format: FormatBase}) {
		t.Fatalf("layout %+v, %v", l, err)
	}
	if err := RecordShards(ctx, js, 1, 8, 4, 6); err != nil {
		t.Fatal(err)
	}
	if l, err := ReadLayout(ctx, js); err != nil || l != (Layout{Partitions: 8, Shards: 4, Format: 6}) {
		t.Fatalf("layout after RecordShards %+v, %v", l, err)
	}
	conn := eventlogtest.Connect(t, s)
	if _, err := New(context.Background(), Config{Conn: conn, Node: "a", Partitions: 8, Format: 6, ShardsFormat: 6}); !errors.Is(err, ErrShardsMismatch) {
		t.Fatalf("unsharded node after the move: %v, want ErrShardsMismatch", err)
	}
	if _, err := New(context.Background(), Config{Conn: conn, Node: "a", Partitions: 8, Shards: 4, Format: 5}); !errors.Is(err, ErrFormatTooNew) {
		t.Fatalf("older release after the move: %v, want ErrFormatTooNew", err)
	}
	startNode(t, s, Config{Node: "a", Partitions: 8, Shards: 4, Format: 6, ShardsFormat: 6})
	// Without a count, with AdoptShards, a node takes the cluster's and
	// reads the format of shards.
	b := startNode(t, s, Config{Node: "b", Partitions: 8, Format: 5, ShardsFormat: 6, AdoptShards: true})
	if b.m.Shards() != 4 {
		t.Fatalf("adopted %d shards, want 4", b.m.Shards())
	}
}
