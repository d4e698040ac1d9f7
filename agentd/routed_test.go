package agentd

import (
	"testing"

	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/waitfor"
)

// routedTo reaches the servers its server routes to, itself included, and
// not one that stopped, from the moment its routes closed, whenever the
// predicate was made: the leader spread gives that one no stream, though
// the streams' leaders heard from it within the last seconds, even when
// it stopped while the spread read the streams.
func TestRoutedTo(t *testing.T) {
	if routedTo(nil) != nil {
		t.Fatal("routedTo without an embedded server is not nil")
	}
	srvs := eventlogtest.RunCluster(t, 3)
	reach := routedTo(srvs[0])
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
