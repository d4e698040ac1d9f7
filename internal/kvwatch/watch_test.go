package kvwatch

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// TestWatchOutlivesItsServer: the server holding the watch's consumer
// dies while the bucket lives on in the cluster. A key written after that
// is delivered well before nats.go would notice on its own (19 s
// measured).
func TestWatchOutlivesItsServer(t *testing.T) {
	srvs := eventlogtest.RunCluster(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js := func(s *server.Server) jetstream.JetStream {
		j, err := jetstream.New(eventlogtest.Connect(t, s))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	var leader string
	wait(t, 30*time.Second, "the bucket created", func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		kv, err := js(srvs[0]).CreateOrUpdateKeyValue(cctx, jetstream.KeyValueConfig{Bucket: "T", Replicas: 3})
		if err != nil {
			return false
		}
		st, err := js(srvs[0]).Stream(cctx, "KV_T")
		if err != nil {
			return false
		}
		leader = st.CachedInfo().Cluster.Leader
		_, err = kv.Put(cctx, "k0", []byte("x"))
		return err == nil && leader != ""
	})
	var on *server.Server // the watcher's server: not the bucket's leader
	for _, s := range srvs {
		if s.Name() != leader {
			on = s
			break
		}
	}
	var mu sync.Mutex
	got := map[string]bool{}
	restarts := 0
	wjs := js(on)
	// The server picks where the watch's consumer lives: watch again until
	// it is not the watcher's own (that one would take the watcher down).
	var holders []string
	for try := 0; ; try++ {
		rctx, rcancel := context.WithCancel(ctx)
		defer rcancel()
		synced := make(chan bool, 4)
		go Run(rctx, Config{JS: wjs, Bucket: "T", Check: 200 * time.Millisecond, Lag: 200 * time.Millisecond,
			Apply: func(e jetstream.KeyValueEntry) {
				mu.Lock()
				got[e.Key()] = true
				mu.Unlock()
			},
			Synced:    func(first bool) { synced <- first },
			OnRestart: func() { mu.Lock(); restarts++; mu.Unlock() },
		})
		if first := <-synced; !first {
			t.Fatal("the first watch's sync says it is not the first")
		}
		holders = eventlogtest.ConsumerServers(t, wjs, "KV_T")
		if len(holders) == 1 && holders[0] != on.Name() {
			break
		}
		if try == 10 {
			t.Skipf("the watch's consumer is on %v, the watcher's server is %s: no server to kill", holders, on.Name())
		}
		rcancel()
		wait(t, 10*time.Second, "the watch's consumer gone", func() bool { return len(eventlogtest.ConsumerServers(t, wjs, "KV_T")) == 0 })
	}
	var probe *server.Server
	for _, s := range srvs {
		switch s.Name() {
		case holders[0]:
			s.Shutdown()
		case on.Name():
		default:
			probe = s
		}
	}
	killed := time.Now()
	pjs := js(probe)
	wait(t, 30*time.Second, "a key written after the kill", func() bool {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		defer pcancel()
		kv, err := pjs.KeyValue(pctx, "T")
		if err == nil {
			_, err = kv.Put(pctx, "after", []byte("x"))
		}
		return err == nil
	})
	// A bound, not a timing: far above a restart (Check + Lag and a new
	// consumer), far below the library's own detection.
	wait(t, 10*time.Second-time.Since(killed), "the key written after the kill delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got["after"]
	})
	mu.Lock()
	defer mu.Unlock()
	if restarts == 0 || !got["k0"] {
		t.Errorf("restarts %d, keys %v", restarts, got)
	}
	t.Logf("delivered %s after the watch's server died", time.Since(killed).Round(time.Millisecond))
}

func wait(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	waitfor.Within(t, d, func() error {
		if !cond() {
			return errors.New(what)
		}
		return nil
	})
}
