package eventlog_test

import (
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// SpreadLeaders gives each server of an R3 cluster its share of the shard
// streams' leaders (3 shards of each kind: 2 each), and once they are
// spread it moves nothing; appends go on across the moves.
func TestSpreadLeaders(t *testing.T) {
	ctx := t.Context()
	srvs := eventlogtest.RunCluster(t, 3)
	lg := eventlogtest.OpenOn(t, srvs[0], eventlog.Config{Replicas: 3, Shards: 3, Partitions: 6})
	agents := agentsOverShards(t, 12, 6, 3)
	deadline := time.Now().Add(60 * time.Second)
	var leaders []eventlog.Leader
	for {
		var err error
		leaders, err = lg.SpreadLeaders(ctx)
		if err != nil {
			t.Logf("spread: %v", err) // a stepdown refused while an election runs
		}
		counts := map[string]int{}
		spread := len(leaders) == 6
		for _, ld := range leaders {
			counts[ld.Leader]++
			spread = spread && ld.Leader == ld.Want && !ld.Moved
		}
		if spread {
			if len(counts) != 3 || counts["s0"] != 2 || counts["s1"] != 2 || counts["s2"] != 2 {
				t.Fatalf("spread leaders %v: %v", leaders, counts)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leaders not spread: %+v", leaders)
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
			t.Fatalf("append after the spread: %v", err)
		}
	}
	// An unreplicated log has nothing to spread.
	one, _ := eventlogtest.Open(t, eventlog.Config{Shards: 2, Partitions: 4})
	if got, err := one.SpreadLeaders(ctx); got != nil || err != nil {
		t.Errorf("R1 spread: %v, %v", got, err)
	}
}
