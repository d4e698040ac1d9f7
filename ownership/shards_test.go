package ownership

import (
	"context"
	"errors"
	"testing"

	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/nats-io/nats.go/jetstream"
)

// The shard count is fixed when the cluster is created: a node started
// with another (or with shards on a cluster created without) refuses,
// and a cluster created with shards starts at their record format, so an
// older release refuses to join it.
func TestShardsMismatch(t *testing.T) {
	for _, tc := range []struct {
		name          string
		created, join int
	}{
		{"sharded, joined with another count", 2, 4},
		{"sharded, joined without", 2, 0},
		{"unsharded, joined with shards", 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
			a := startNode(t, s, Config{Node: "a", Partitions: 8, Shards: tc.created, Format: 6, ShardsFormat: 6})
			if got := a.m.Shards(); got != tc.created {
				t.Fatalf("Shards = %d", got)
			}
			_, err := New(context.Background(), Config{Conn: eventlogtest.Connect(t, s), Node: "b", Partitions: 8, Shards: tc.join, Format: 6, ShardsFormat: 6})
			if !errors.Is(err, ErrShardsMismatch) {
				t.Fatalf("got %v, want ErrShardsMismatch", err)
			}
		})
	}
	t.Run("same count joins; an older release does not", func(t *testing.T) {
		s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
		startNode(t, s, Config{Node: "a", Partitions: 8, Shards: 4, Format: 6, ShardsFormat: 6})
		startNode(t, s, Config{Node: "b", Partitions: 8, Shards: 4, Format: 6, ShardsFormat: 6})
		_, err := New(context.Background(), Config{Conn: eventlogtest.Connect(t, s), Node: "c", Partitions: 8, Format: 3})
		if !errors.Is(err, ErrFormatTooNew) && !errors.Is(err, ErrShardsMismatch) {
			t.Fatalf("older release: got %v, want ErrFormatTooNew", err)
		}
		// An older release does not know the shard count: only the
		// format stops it.
		if _, err := New(context.Background(), Config{Conn: eventlogtest.Connect(t, s), Node: "d", Partitions: 8, Shards: 4, Format: 3}); !errors.Is(err, ErrFormatTooNew) {
			t.Fatalf("older format: got %v, want ErrFormatTooNew", err)
		}
	})
	t.Run("bad config", func(t *testing.T) {
		s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
		if _, err := New(context.Background(), Config{Conn: eventlogtest.Connect(t, s), Node: "a", Partitions: 8, Shards: 3}); err == nil {
			t.Fatal("3 shards of 8 partitions accepted")
		}
	})
}

// With AdoptShards, Shards is the count a new cluster is created with
// (its default): the first node creates the cluster with it and starts
// the shards' format, and a node started with the same default on a
// cluster that stored another count, or none (created before shards),
// takes the stored one, so no data moves by surprise.
func TestAdoptShardsCreatesWithTheDefault(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	a := startNode(t, s, Config{Node: "a", Partitions: 8, Shards: 4, Format: 6, ShardsFormat: 6, AdoptShards: true})
	if got := a.m.Shards(); got != 4 {
		t.Fatalf("new cluster: Shards = %d, want the default 4", got)
	}
	js, err := jetstream.New(a.nc)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ReadLayout(t.Context(), js)
	if err != nil || l != (Layout{Partitions: 8, Shards: 4, Format: 6}) {
		t.Fatalf("layout of a cluster created with the default %+v, %v", l, err)
	}
	b := startNode(t, s, Config{Node: "b", Partitions: 8, Shards: 2, Format: 6, ShardsFormat: 6, AdoptShards: true})
	if got := b.m.Shards(); got != 4 {
		t.Fatalf("joined with another default: Shards = %d, want the stored 4", got)
	}

	// A cluster created unsharded keeps its layout.
	s = eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	old := startNode(t, s, Config{Node: "a", Partitions: 8, Format: 5})
	c := startNode(t, s, Config{Node: "c", Partitions: 8, Shards: 4, Format: 6, ShardsFormat: 6, AdoptShards: true})
	if got := c.m.Shards(); got != 0 {
		t.Fatalf("unsharded cluster joined with a default: Shards = %d, want 0", got)
	}
	if js, err = jetstream.New(old.nc); err != nil {
		t.Fatal(err)
	}
	if l, err := ReadLayout(t.Context(), js); err != nil || l != (Layout{Partitions: 8, Shards: 0, Format: FormatBase}) {
		t.Errorf("unsharded cluster joined with a default: layout %+v, %v", l, err)
	}
}
