package eventlog_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestOwnedViewsRetakeAsksNoStreamInfo: a running Follower that takes a
// new partition, or one it followed before, opens it without asking the
// stream's info. Asked, the info timed out after 5 s while the stream
// elected a leader just after a node died, and held every recovery of the
// partitions the node took (chaos, stop 58). The views stay right: the
// partition followed again resumes from the cursor it committed after the
// info was last read, rather than being judged past the stream's end.
func TestOwnedViewsRetakeAsksNoStreamInfo(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{Shards: 2, Partitions: 4, OwnedViews: true})
	agents := agentPerPartition(4)
	p0, p2 := agents[0], agents[2] // both in shard 0
	tick := func(agent string, n int) {
		t.Helper()
		for range n {
			appendTick(t, ctx, lg, agent)
		}
	}
	if err := lg.FollowPartition(0); err != nil {
		t.Fatal(err)
	}
	f := newFollower(t, lg, counter(1))
	eventlogtest.RunFollower(t, f)
	tick(p0, 2)
	if err := f.WaitPartition(ctx, 0); err != nil {
		t.Fatal(err)
	}

	nc := eventlogtest.Connect(t, s)
	infos, err := nc.SubscribeSync("$JS.API.STREAM.INFO.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	step := func(what string, do func()) {
		t.Helper()
		do()
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if n, _, _ := infos.Pending(); n != 0 {
			var subjects []string
			for range n {
				m, _ := infos.NextMsg(0)
				subjects = append(subjects, m.Subject)
			}
			t.Errorf("%s asked the stream's info %d times: %v", what, n, subjects)
		}
	}
	follow := func(p int) {
		if err := lg.FollowPartition(p); err != nil {
			t.Fatal(err)
		}
		if err := f.WaitPartition(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	tick(p2, 3)
	step("taking a new partition", func() { follow(2) })
	tick(p2, 2) // its cursor moves past the last sequence the info said
	if err := f.WaitPartition(ctx, 2); err != nil {
		t.Fatal(err)
	}
	step("releasing it", func() {
		if err := lg.UnfollowPartition(2); err != nil {
			t.Fatal(err)
		}
		tick(p0, 1)
		if err := f.WaitPartition(ctx, 0); err != nil {
			t.Fatal(err)
		}
	})
	tick(p2, 1)
	step("taking it again", func() { follow(2) })
	if got, want := dump(t, lg, "counter")["n/"+p2], "6"; got != want {
		t.Errorf("partition 2's count = %q, want %q", got, want)
	}
	if got, want := dump(t, lg, "counter")["n/"+p0], "3"; got != want {
		t.Errorf("partition 0's count = %q, want %q", got, want)
	}
}

// TestShardFailureRestartsThatShardAlone: a shard follower whose leader
// reads fail (its stream electing a leader) starts again alone, after a
// backoff; the other shard's follower is not stopped, and its partition's
// waits go on. Failing the whole Follower made every shard wait, and a
// new owner's every recovery (chaos, stop 58).
func TestShardFailureRestartsThatShardAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// Replicated streams: their last sequences are read from the leader,
	// which RefuseLeaderGets refuses.
	srvs := eventlogtest.RunCluster(t, 3)
	lg := eventlogtest.OpenOn(t, srvs[0], eventlog.Config{Replicas: 3, Shards: 2, Partitions: 4, OwnedViews: true})
	agents := agentPerPartition(4)
	tick := func(p int) {
		t.Helper()
		appendTick(t, ctx, lg, agents[p])
	}
	for _, p := range []int{0, 1} {
		if err := lg.FollowPartition(p); err != nil {
			t.Fatal(err)
		}
	}
	f := newFollower(t, lg, counter(1))
	eventlogtest.RunFollower(t, f)
	for _, p := range []int{0, 1, 2} {
		tick(p)
	}
	for _, p := range []int{0, 1} {
		if err := f.WaitPartition(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	before := eventlog.ShardStarts(f)

	var refuse atomic.Bool
	refuse.Store(true)
	eventlog.RefuseLeaderGets(lg, refuse.Load)
	if err := lg.FollowPartition(2); err != nil { // shard 0 starts again, and fails
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // its reads give up after about 1.5 s
	tick(1)
	refuse.Store(false)
	for _, p := range []int{1, 2} {
		if err := f.WaitPartition(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	after := eventlog.ShardStarts(f)
	if after[1] != before[1] {
		t.Errorf("shard 1 started %d times while shard 0's reads failed, want 0 (starts %v, then %v)", after[1]-before[1], before, after)
	}
	if after[0] < before[0]+2 {
		t.Errorf("shard 0 started %d times, want its retake and at least one start after the failure (starts %v, then %v)", after[0]-before[0], before, after)
	}
	if got := dump(t, lg, "counter")["n/"+agents[1]]; got != "2" {
		t.Errorf("partition 1's count = %q, want 2", got)
	}
	if got := dump(t, lg, "counter")["n/"+agents[2]]; got != "1" {
		t.Errorf("partition 2's count = %q, want 1", got)
	}
}

// agentPerPartition returns an agent of each of n partitions, by
// partition.
func agentPerPartition(n int) map[int]string {
	agents := map[int]string{}
	for i := 0; len(agents) < n; i++ {
		id := "agent" + strconv.Itoa(i)
		if p := eventlog.PartitionOf(id, n); agents[p] == "" {
			agents[p] = id
		}
	}
	return agents
}

// appendTick appends one event the counter view counts to agent.
func appendTick(t *testing.T, ctx context.Context, lg *eventlog.Log, agent string) {
	t.Helper()
	if _, err := lg.Append(ctx, eventlog.Event{Agent: agent, Type: "tick", Data: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
}
