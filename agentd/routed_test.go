package agentd

import (
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/waitfor"
)

// routedTo reaches the servers its server routes to, itself included, and
// not one that stopped, from the moment its routes closed, whenever the
// predicate was made: the leader spread gives that one no stream, though
// the streams' leaders heard from it within the last seconds, even when
// it stopped while the spread read the streams. Nor does it reach one
// whose routes came up within the settle time (a server that restarted a
// moment ago): here the cluster's routes are seconds old, against an hour.
func TestRoutedTo(t *testing.T) {
	if routedTo(nil) != nil {
		t.Fatal("routedTo without an embedded server is not nil")
	}
	srvs := eventlogtest.RunCluster(t, 3)
	young := routedSince(srvs[0], time.Hour)
	if !young("s0") || young("s1") || young("s2") {
		t.Fatalf("routes up for less than an hour: s0 reaches s0 %t, s1 %t, s2 %t; want itself only", young("s0"), young("s1"), young("s2"))
	}
	reach := routedSince(srvs[0], 0)
	for _, name := range []string{"s0", "s1", "s2"} {
		if !reach(name) {
			t.Fatalf("s0 does not reach %s", name)
		}
	}
	if reach("s9") {
		t.Fatal("s0 reaches s9, which is no server")
	}
	srvs[2].Shutdown()
	srvs[2].WaitForShutdown()
	waitfor.True(t, "s0's routes to the stopped s2 closed", func() bool { return !reach("s2") })
	if !reach("s1") || !reach("s0") {
		t.Fatal("s0 no longer reaches s1 or itself")
	}
}
