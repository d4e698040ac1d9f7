package eventlog_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/waitfor"
)

// TestShardLagGoesWithItsFollower: with owned views each shard follower
// reports its projections' lag under its own stream, and a shard whose
// partitions were all released takes its series with it. Left behind,
// the last lag it saw stood for a shard nobody followed, never to go down
// (a node's views looked 232 events behind for good after a rebuild).
func TestShardLagGoesWithItsFollower(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	const parts, shards = 4, 2 // partition p in shard p mod 2
	reg := prometheus.NewRegistry()
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{Shards: shards, Partitions: parts, OwnedViews: true, Registerer: reg})
	for _, id := range agentsOverShards(t, 16, parts, shards) {
		if p := eventlog.PartitionOf(id, parts); p != 0 && p != 1 {
			continue
		}
		if _, err := lg.Append(ctx, eventlog.Event{Agent: id, Type: "tick", Data: json.RawMessage(`1`)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []int{0, 1} {
		if err := lg.FollowPartition(p); err != nil {
			t.Fatal(err)
		}
	}
	f := newFollower(t, lg, counter(1))
	eventlogtest.RunFollower(t, f)
	for _, p := range []int{0, 1} {
		if err := f.WaitPartition(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	// lagStreams lists the streams with a lag series of the counter view.
	lagStreams := func() []string {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, mf := range mfs {
			if mf.GetName() != "forever_eventlog_projection_lag_events" {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["projection"] == "counter" {
					out = append(out, labels["stream"])
				}
			}
		}
		slices.Sort(out)
		return out
	}
	both := lagStreams()
	if len(both) != 2 {
		t.Fatalf("lag series of the counter view with partitions in both shards: %v, want one a shard", both)
	}
	if err := lg.UnfollowPartition(1); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, "shard 1's lag series gone with its last partition", func() bool {
		got := lagStreams()
		return len(got) == 1 && slices.Contains(both, got[0])
	})
}
