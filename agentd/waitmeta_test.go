package agentd

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/freeport"
	"github.com/forever-agents/forever/internal/waitfor"
)

// TestWaitMeta: waitMeta reports a server whose JetStream meta layer is
// current at once (a standalone server's always is), and gives up at its
// bound, reporting false, on a cluster member that has no meta leader (its
// peers down): the start then goes on to RetryQuorum, which waits for the
// quorum and says so.
func TestWaitMeta(t *testing.T) {
	for _, tc := range []struct {
		name      string
		clustered bool
		want      bool
	}{{"standalone", false, true}, {"member without peers", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
				Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))}
			if tc.clustered {
				var routes []string
				for range 2 {
					addr, release, err := freeport.Reserve()
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(release) // reserved: nothing answers there
					routes = append(routes, addr)
				}
				cfg.ServerName, cfg.ClusterName, cfg.ClusterListen, cfg.Routes = "n1", "c", "127.0.0.1:0", routes
			}
			_, s := serverOf(t, cfg)
			if got := waitMeta(context.Background(), s, 200*time.Millisecond, nil); got != tc.want {
				t.Fatalf("waitMeta = %t, want %t", got, tc.want)
			}
		})
	}
}

// serverOf starts cfg's embedded server as a daemon's start does, shut
// down when the test ends, and returns the daemon it was made for.
func serverOf(t *testing.T, cfg Config) (*Daemon, *server.Server) {
	t.Helper()
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := startServer(context.Background(), &d.cfg, d.cfg.Logger, nil, nil, d.denials)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return d, s
}

// TestWaitMetaNudgesARestartedMember: a member restarted while the meta
// log moved on (consumers created and deleted without it) is behind its
// leader until two append entries reached it; waitMeta nudges the leader
// until the member is current, and each nudge's consumer is deleted by
// the server once unused.
func TestWaitMetaNudgesARestartedMember(t *testing.T) {
	srvs := eventlogtest.RunCluster(t, 3)
	ctx := t.Context()
	nc := eventlogtest.Connect(t, srvs[0])
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const stream = "LEASES"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"leases.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	restart := eventlogtest.StopServer(t, srvs, 1)
	for i := range 3 {
		name := fmt.Sprintf("moved-on-%d", i)
		// Until the stream elects a leader in place of the stopped one.
		waitfor.NoError(t, func() error {
			_, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: name})
			return err
		})
		waitfor.NoError(t, func() error { return js.DeleteConsumer(ctx, stream, name) })
	}
	restart()
	rnc := eventlogtest.Connect(t, srvs[1])
	nudges := 0
	nudge := nudgeMeta(rnc, stream)
	began := time.Now()
	if !waitMeta(ctx, srvs[1], 30*time.Second, func() { nudges++; nudge() }) {
		t.Fatal("the restarted member is not current with its meta leader after 30s")
	}
	if nudges == 0 {
		t.Fatal("waitMeta did not nudge the meta leader of a member behind it")
	}
	t.Logf("current after %s and %d nudges", time.Since(began), nudges)
	// Every nudge's consumer goes once unused for metaNudgeTTL.
	waitfor.True(t, "the nudges' consumers deleted", func() bool {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return false
		}
		lister := st.ListConsumers(ctx)
		n := 0
		for ci := range lister.Info() {
			if strings.HasPrefix(ci.Name, metaNudgePrefix) {
				n++
			}
		}
		return lister.Err() == nil && n == 0
	})
}
