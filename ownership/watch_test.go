package ownership

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// TestWatchOutlivesItsServer: the server holding a node's lease watch (an
// ordered consumer) dies while the bucket lives on in the cluster. The
// watch must deliver again well before the client library would notice on
// its own (19 s measured), because until it does, no dead holder's lease
// can be judged stale.
func TestWatchOutlivesItsServer(t *testing.T) {
	srvs := eventlogtest.RunCluster(t, 3)
	cfg := Config{Node: "a", Partitions: 4, TTL: 2 * time.Second, Replicas: 3}
	ctx := context.Background()

	// Create the bucket first, to put the node on a server that does not
	// lead it: the watch's consumer lands on the leader.
	first := newManager(t, srvs[0], cfg)
	leader := streamLeader(t, first, "KV_"+first.cfg.Bucket)
	var on *server.Server
	for _, s := range srvs {
		if s.Name() != leader {
			on = s
			break
		}
	}
	a := startNode(t, on, cfg)
	consumers := eventlogtest.ConsumerServers(t, a.m.js, "KV_"+a.m.cfg.Bucket)
	if len(consumers) != 1 || consumers[0] == on.Name() {
		t.Skipf("the watch's consumer is on %v, the node's server is %s: no server to kill", consumers, on.Name())
	}
	var probe *server.Server
	for _, s := range srvs {
		switch s.Name() {
		case consumers[0]:
			s.Shutdown()
		case on.Name():
		default:
			probe = s
		}
	}
	killed := time.Now()
	pkv, err := jetstream.New(eventlogtest.Connect(t, probe))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "a probe key written after the kill", func() bool {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		kv, err := pkv.KeyValue(pctx, a.m.cfg.Bucket)
		if err == nil {
			_, err = kv.Put(pctx, prefixNode+"probe", []byte(`{}`))
		}
		return err == nil
	})
	// A bound, not a timing: far above a working restart (about a second),
	// far below the library's own detection.
	const bound = 10 * time.Second
	waitfor.Within(t, bound, func() error {
		if !watched(a.m, "probe") {
			return errors.New("the watch to deliver the probe after its server died")
		}
		return nil
	})
	t.Logf("the watch delivered the probe %s after its server died", time.Since(killed).Round(time.Millisecond))
}

// watched reports whether m's watch delivered node's heartbeat key. Not
// Nodes: it leaves out a node whose heartbeat it has not seen for a TTL,
// and the probe writes its key once, so a check that came a TTL (2 s)
// after the delivery, as on a loaded machine, missed it for good.
func watched(m *Manager, node string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.mu.nodes[node]
	return ok
}

// newManager makes a Manager on s, retrying while the cluster forms.
func newManager(t *testing.T, s *server.Server, cfg Config) *Manager {
	t.Helper()
	cfg.Conn = eventlogtest.Connect(t, s)
	var m *Manager
	eventually(t, "the lease bucket created", func() bool {
		var err error
		m, err = New(context.Background(), cfg)
		return err == nil
	})
	return m
}

func streamLeader(t *testing.T, m *Manager, stream string) string {
	t.Helper()
	st, err := m.js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.Cluster.Leader
}
