package agentd

import (
	"context"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/chartargs"
	"github.com/nats-io/nats.go/jetstream"
)

// A node started without --shards creates a new cluster of servers with
// DefaultShards (the largest power of 2 up to it dividing --partitions),
// a single server unsharded, and never gives shards to a log whose
// unsharded events stream exists; --shards given is the count, 1 the
// unsharded layout. The chart's shards value defaults to the same count.
func TestCreationShards(t *testing.T) {
	if chartargs.DefaultShards != DefaultShards {
		t.Errorf("the chart's default shards %d, agentd's %d", chartargs.DefaultShards, DefaultShards)
	}
	for _, tc := range []struct {
		partitions int
		clustered  bool
		want       int
	}{
		{DefaultPartitions, true, 8},
		{DefaultPartitions, false, 0},
		{12, true, 4},
		{6, true, 2},
		{7, true, 0},
		{1, true, 0},
		{1024, true, 8},
	} {
		c := Config{Partitions: tc.partitions}
		if got := c.newClusterShards(tc.clustered); got != tc.want {
			t.Errorf("%d partitions, clustered %v: %d shards, want %d", tc.partitions, tc.clustered, got, tc.want)
		}
		if got := c.newClusterShards(tc.clustered); got > 1 && tc.partitions%got != 0 {
			t.Errorf("%d shards do not divide %d partitions", got, tc.partitions)
		}
	}

	ctx := t.Context()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	nc := eventlogtest.Connect(t, s)
	check := func(what string, c Config, want int) {
		t.Helper()
		got, err := c.creationShards(ctx, nc)
		if err != nil || got != want {
			t.Errorf("%s: %d shards, %v; want %d", what, got, err, want)
		}
	}
	// Replicas 3 stands for a cluster of servers: creationShards reads
	// only whether the unsharded events stream exists.
	check("new cluster, no flag", Config{Partitions: 64, Replicas: 3}, 8)
	check("new single server, no flag", Config{Partitions: 64, Replicas: 1}, 0)
	check("--shards 4", Config{Partitions: 64, Replicas: 3, Shards: 4}, 4)
	check("--shards 1", Config{Partitions: 64, Replicas: 3, Shards: 1}, 0)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: eventlog.DefaultEventsStream, Subjects: []string{"forever.evt.>"}}); err != nil {
		t.Fatal(err)
	}
	check("unsharded events stream without a stored count, no flag", Config{Partitions: 64, Replicas: 3}, 0)
	check("unsharded events stream, --shards 4", Config{Partitions: 64, Replicas: 3, Shards: 4}, 4)
}
