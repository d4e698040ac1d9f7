package eventlog_test

import (
	"context"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/nats-io/nats-server/v2/server"
)

// SpreadLeaders gives each server of an R3 cluster its share of the shard
// streams' leaders (3 shards of each kind: 2 each), and once they are
// spread it moves nothing; appends go on across the moves. A server that
// is lost loses its leaders to the others, and once it returns the next
// calls give it its share back.
func TestSpreadLeaders(t *testing.T) {
	ctx := t.Context()
	srvs, lg, agents := spreadCluster(t)

	// s2 is lost: its leaders are elected elsewhere, and it is wanted by
	// no stream while it is not a current replica.
	restart := eventlogtest.StopServer(t, srvs, 2)
	deadline := time.Now().Add(60 * time.Second)
	for {
		leaders, err := lg.SpreadLeaders(ctx, nil)
		led := map[string]int{}
		for _, ld := range leaders {
			led[ld.Leader]++
			if ld.Want == "s2" {
				t.Fatalf("a stream wants the lost s2 to lead it: %+v", ld)
			}
		}
		if err == nil && len(leaders) == 6 && led["s2"] == 0 && led[""] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leaders did not leave the lost s2: %+v, %v", leaders, err)
		}
		// Not a synchronisation: paces the checks while elections run.
		time.Sleep(200 * time.Millisecond)
	}
	// s2 returns: it gets its 2 leaders back.
	restart()
	waitSpread(ctx, t, lg, agents, "spread after s2 returned")

	// An unreplicated log has nothing to spread.
	one, _ := eventlogtest.Open(t, eventlog.Config{Shards: 2, Partitions: 4})
	if got, err := one.SpreadLeaders(ctx, nil); got != nil || err != nil {
		t.Errorf("R1 spread: %v, %v", got, err)
	}
}

// spreadCluster runs a 3-server cluster with an R3 log of 3 shards, 12
// agents over them, and its leaders spread (waitSpread).
func spreadCluster(t *testing.T) ([]*server.Server, *eventlog.Log, []string) {
	t.Helper()
	srvs := eventlogtest.RunCluster(t, 3)
	lg := eventlogtest.OpenOn(t, srvs[0], eventlog.Config{Replicas: 3, Shards: 3, Partitions: 6})
	agents := agentsOverShards(t, 12, 6, 3)
	waitSpread(t.Context(), t, lg, agents, "spread")
	return srvs, lg, agents
}

// waitSpread calls SpreadLeaders, appending to every agent between calls,
// until the 6 streams of 3 shards are led 2 by each of s0, s1 and s2 and
// nothing moves (it fails the test if that takes past its bound); then
// every agent still appends.
func waitSpread(ctx context.Context, t *testing.T, lg *eventlog.Log, agents []string, what string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var leaders []eventlog.Leader
	for {
		var err error
		leaders, err = lg.SpreadLeaders(ctx, nil)
		if err != nil {
			t.Logf("%s: %v", what, err) // a stepdown refused while an election runs
		}
		counts := map[string]int{}
		spread := len(leaders) == 6
		for _, ld := range leaders {
			counts[ld.Leader]++
			spread = spread && ld.Leader == ld.Want && !ld.Moved
		}
		// Nothing moves while a server still catches up (it is no
		// current replica yet): spread means 2 each, and nothing moving.
		if spread && len(counts) == 3 && counts["s0"] == 2 && counts["s1"] == 2 && counts["s2"] == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: leaders not spread 2 a server: %+v", what, leaders)
		}
		for _, a := range agents {
			if _, err := appendNote(ctx, lg, a); err != nil {
				t.Logf("append during a move: %v", err)
			}
		}
		// Not a synchronisation: paces the spread's retries, as each asks
		// for stepdowns and an election takes a while.
		time.Sleep(200 * time.Millisecond)
	}
	for _, a := range agents {
		if _, err := appendNote(ctx, lg, a); err != nil {
			t.Fatalf("%s: append after the spread: %v", what, err)
		}
	}
}

// TestSpreadLeadersRechecksBeforeAStepdown: a server reachable when the
// spread read the streams but not by the time it would ask a leader to
// step down for it (killed meanwhile) is given no stream; once it is
// reachable, the spread gives it its share.
func TestSpreadLeadersRechecksBeforeAStepdown(t *testing.T) {
	ctx := t.Context()
	srvs, lg, agents := spreadCluster(t)
	// s2 leaves and returns: it leads nothing until a spread gives it its
	// share.
	restart := eventlogtest.StopServer(t, srvs, 2)
	waitfor.True(t, "s2's leaders elected elsewhere", func() bool {
		leaders, err := lg.SpreadLeaders(ctx, nil)
		if err != nil || len(leaders) != 6 {
			return false
		}
		for _, ld := range leaders {
			if ld.Leader == "s2" || ld.Leader == "" {
				return false
			}
		}
		return true
	})
	restart()
	// Reachable once (the read of the streams asks about each server
	// once), then gone: the spread wants s2, and asks no leader for it.
	wanted := false
	deadline := time.Now().Add(60 * time.Second)
	for !wanted {
		asked := 0
		leaders, err := lg.SpreadLeaders(ctx, func(name string) bool {
			if name != "s2" {
				return true
			}
			asked++
			return asked == 1
		})
		for _, ld := range leaders {
			if ld.Want == "s2" && ld.Leader != "s2" {
				wanted = true
				if ld.Moved {
					t.Fatalf("a leader was asked to step down for s2, unreachable by then: %+v", ld)
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the spread never wanted the returned s2: %+v, %v", leaders, err)
		}
		for _, a := range agents {
			_, _ = appendNote(ctx, lg, a)
		}
		// Not a synchronisation: paces the checks while s2 catches up.
		time.Sleep(200 * time.Millisecond)
	}
	waitSpread(ctx, t, lg, agents, "spread once s2 is reachable")
}
