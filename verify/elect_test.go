package verify_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/verify"
)

// Check on a cluster whose events stream lost its leader reads the whole
// log once the others elect one. The server stops in order here, so the
// election is quick and the reads wait it out; the 10008 answers that a
// server gives meanwhile in a longer one ("agentd verify" failed on one
// in a CI chaos run, after a restart moved the stream leaders) are
// TestUntilAnswered's.
func TestCheckWhileItsStreamElects(t *testing.T) {
	srvs := eventlogtest.RunCluster(t, 3)
	began := time.Now()
	cfg := eventlog.Config{Replicas: 3}
	ctx := t.Context()
	// The log reads through a server that does not lead the events stream.
	leader := func() string {
		nc := eventlogtest.Connect(t, srvs[0])
		js, _ := jetstream.New(nc)
		s, err := js.Stream(ctx, eventlog.DefaultEventsStream)
		if err != nil || s.CachedInfo().Cluster == nil {
			return ""
		}
		return s.CachedInfo().Cluster.Leader
	}
	lg := eventlogtest.OpenOn(t, srvs[0], cfg)
	clean(history{t, lg})
	led := slices.IndexFunc(srvs, func(s *server.Server) bool { return s.Name() == leader() })
	if led < 0 {
		t.Fatal("the events stream has no leader")
	}
	if led == 0 {
		lg = eventlogtest.OpenOn(t, srvs[1], cfg)
	}
	// nats-server answers 10008 for a leaderless group only from its
	// servers that have run 10 s.
	time.Sleep(max(0, 11*time.Second-time.Since(began))) // not a synchronisation: nats-server's startup threshold
	eventlogtest.StopServers(t, srvs, led)

	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	checkBegan := time.Now()
	rep, err := verify.Check(cctx, lg, verify.Options{})
	if err != nil {
		t.Fatalf("check while the stream elects: %v after %s", err, time.Since(checkBegan))
	}
	if !rep.OK() || rep.Agents != 4 {
		t.Fatalf("check while the stream elects read:\n%s", rep)
	}
	t.Logf("checked %s after its leader's server stopped", time.Since(checkBegan))
}
