package eventlog_test

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// A burst of acquisitions (a restarted node taking its partitions from
// several holders at once) restarts only the shard followers whose
// partitions changed: a shard none of whose partitions moved keeps its
// consumer (it restarted at every change before, 1.3 s of a 6-node
// restart's recovery at load 30, issue 36), and the views still hold
// exactly the followed partitions' events. A release and an acquisition
// in one shard then leave the other shards alone too.
func TestOwnedViewsRestartOnlyChangedShards(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	const parts, shards = 8, 4
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{Shards: shards, Partitions: parts, OwnedViews: true})
	agents := agentsOverShards(t, 32, parts, shards)
	tick := func() {
		t.Helper()
		for _, id := range agents {
			if _, err := lg.Append(ctx, eventlog.Event{Agent: id, Type: "tick", Data: json.RawMessage(`1`)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	tick()
	if err := lg.FollowPartition(0); err != nil {
		t.Fatal(err)
	}
	f := newFollower(t, lg, counter(1))
	eventlogtest.RunFollower(t, f)
	if err := f.WaitPartition(ctx, 0); err != nil {
		t.Fatal(err)
	}
	check := func(followed ...int) {
		t.Helper()
		for _, p := range followed {
			if err := f.WaitPartition(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		// The rows of a partition released keep what was applied.
		got := dump(t, lg, "counter")
		maps.DeleteFunc(got, func(k, _ string) bool {
			_, id, _ := strings.Cut(k, "/")
			return !slices.Contains(followed, eventlog.PartitionOf(id, parts))
		})
		if want := foldOf(t, lg, parts, followed...); !maps.Equal(got, want) {
			t.Fatalf("view of partitions %v:\n got %v\nwant %v", followed, got, want)
		}
	}
	before := eventlog.ShardStarts(f)
	for _, p := range []int{1, 2, 3, 5} { // shards 1, 2, 3 and 1
		if err := lg.FollowPartition(p); err != nil {
			t.Fatal(err)
		}
	}
	tick()
	check(0, 1, 2, 3, 5)
	after := eventlog.ShardStarts(f)
	if after[0] != before[0] {
		t.Errorf("shard 0, none of whose partitions changed, started its consumer %d more times for 4 acquisitions in other shards", after[0]-before[0])
	}
	for k := 1; k < shards; k++ {
		if after[k] == before[k] {
			t.Errorf("shard %d took a partition without starting its consumer again", k)
		}
	}
	// A release and an acquisition in shard 2: shards 0, 1 and 3 go on.
	before = after
	if err := lg.UnfollowPartition(2); err != nil {
		t.Fatal(err)
	}
	if err := lg.FollowPartition(6); err != nil {
		t.Fatal(err)
	}
	tick()
	check(0, 1, 3, 5, 6)
	after = eventlog.ShardStarts(f)
	for _, k := range []int{0, 1, 3} {
		if after[k] != before[k] {
			t.Errorf("shard %d, none of whose partitions changed, started its consumer %d more times for a move in shard 2", k, after[k]-before[k])
		}
	}
}

// A partition acquired whose stored cursor is past its stream's end (a
// store replaced) drops the view, which a shard follower opening alone
// must not do while the others write its rows: every shard follower
// stops, the view is dropped and replayed, and it holds exactly the
// followed partitions' events again.
func TestOwnedViewsAcquisitionThatDrops(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	const parts, shards = 4, 2
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{Shards: shards, Partitions: parts, OwnedViews: true})
	for _, id := range agentsOverShards(t, 16, parts, shards) {
		if _, err := lg.Append(ctx, eventlog.Event{Agent: id, Type: "tick", Data: json.RawMessage(`1`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := lg.FollowPartition(0); err != nil {
		t.Fatal(err)
	}
	f := newFollower(t, lg, counter(1))
	eventlogtest.RunFollower(t, f)
	if err := f.WaitPartition(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := eventlog.PutViewCursor(lg, "counter", 1, 1<<eventlog.SeqShardShift|1<<30); err != nil {
		t.Fatal(err)
	}
	before := eventlog.ShardStarts(f)
	if err := lg.FollowPartition(1); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{0, 1} {
		if err := f.WaitPartition(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := dump(t, lg, "counter"), foldOf(t, lg, parts, 0, 1); !maps.Equal(got, want) {
		t.Fatalf("view after the drop:\n got %v\nwant %v", got, want)
	}
	if after := eventlog.ShardStarts(f); after[0] == before[0] {
		t.Error("shard 0 kept its consumer across a drop of the view it writes")
	}
}
