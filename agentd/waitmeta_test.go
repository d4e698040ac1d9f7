package agentd

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/forever-agents/forever/internal/freeport"
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
			d, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			s, err := startServer(context.Background(), &d.cfg, d.cfg.Logger, nil, nil, d.denials)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
			if got := waitMeta(context.Background(), s, 200*time.Millisecond); got != tc.want {
				t.Fatalf("waitMeta = %t, want %t", got, tc.want)
			}
		})
	}
}
