package eventlog_test

import (
	"context"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestLeaderReadAcrossElection: a read of an agent's last sequence, which
// only its stream's leader answers, sent while the stream has no leader
// and its servers do not know it yet (here: two of its three servers just
// restarted, before their first election; no server answers such a
// request, nor says why), gets the leader's answer once one is elected,
// within the caller's deadline (a caller asking again on "unavailable",
// which the servers answer once they know). Asked once and waited for until the
// deadline, it failed with the deadline, however early the election came.
func TestLeaderReadAcrossElection(t *testing.T) {
	srvs := eventlogtest.RunCluster(t, 3)
	lg := eventlogtest.OpenOn(t, srvs[0], eventlog.Config{Replicas: 3})
	seq, err := appendNote(t.Context(), lg, "x")
	if err != nil {
		t.Fatal(err)
	}
	restart := eventlogtest.StopServers(t, srvs, 0, 1, 2)
	restart(0)
	restart(1)
	// The caller's deadline stands for a command's: longer than an
	// election on a loaded machine.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var got eventlog.Seq
	for {
		// Once the servers know the stream has no leader they say so
		// (10008): a caller asks again, as this does.
		got, err = lg.LastSeq(ctx, eventlog.Filter{Agent: "x"})
		if err == nil || !eventlog.Unavailable(err) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond) // not a synchronisation: a caller's retry backoff
	}
	if err != nil {
		t.Fatalf("last sequence across the election: %v", err)
	}
	if got != seq {
		t.Errorf("last sequence %d, want %d", got, seq)
	}
}
