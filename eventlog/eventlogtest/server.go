// Package eventlogtest runs a real embedded nats-server with JetStream for
// tests, and opens an eventlog.Log on it with Pebble under a temp dir.
package eventlogtest

import (
	"cmp"
	"context"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// ServerOptions tune RunServer. The zero value is a server on a random port
// with JetStream storing under t.TempDir().
type ServerOptions struct {
	// StoreDir, when set, keeps JetStream data across servers (restart tests).
	StoreDir string
	// SyncAlways makes JetStream fsync every write, as agentd does by default.
	SyncAlways bool
	// MaxPayload overrides the server's max payload (default 1 MiB).
	MaxPayload int32
	// MaxStore overrides JetStream's file storage limit (default 1 GiB):
	// a small one fills up, as a full disk does.
	MaxStore int64
}

// RunServer starts an embedded nats-server with JetStream and stops it when
// the test ends.
func RunServer(t testing.TB, o ServerOptions) *server.Server {
	t.Helper()
	dir := o.StoreDir
	if dir == "" {
		dir = t.TempDir()
	}
	opts := &server.Options{
		Host:               "127.0.0.1",
		Port:               -1,
		JetStream:          true,
		StoreDir:           dir,
		JetStreamMaxMemory: 64 << 20,
		JetStreamMaxStore:  cmp.Or(o.MaxStore, 1<<30),
		NoLog:              true,
		NoSigs:             true,
		MaxPayload:         o.MaxPayload,
	}
	if o.SyncAlways {
		opts.SyncAlways = true
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Connect opens a client connection to s, closed when the test ends.
func Connect(t testing.TB, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Open starts a server, connects, and opens a Log with Pebble under a temp
// dir. cfg may be zero; Conn and Dir are filled in when empty.
func Open(t testing.TB, cfg eventlog.Config) (*eventlog.Log, *server.Server) {
	t.Helper()
	s := RunServer(t, ServerOptions{})
	return OpenOn(t, s, cfg), s
}

// OpenOn opens a Log on an existing server.
func OpenOn(t testing.TB, s *server.Server, cfg eventlog.Config) *eventlog.Log {
	t.Helper()
	if cfg.Conn == nil {
		cfg.Conn = Connect(t, s)
	}
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := eventlog.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("open log: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// readyBound bounds a projector's or follower's catch-up to ready: a
// rebuild of 30,000 events under -race took over 30 s on a loaded 2-core
// machine (TestProjectionCrash).
const readyBound = 2 * time.Minute

// RunProjector starts pr.Run in the background, waits until it is ready, and
// stops it (waiting for Run to return) when the test ends, before the Log
// closes.
func RunProjector(t testing.TB, pr *eventlog.Projector) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pr.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("projector %s: %v", pr.Name(), err)
		}
	})
	select {
	case <-pr.Ready():
	case err := <-done:
		done <- nil // let the cleanup return
		t.Fatalf("projector %s stopped: %v", pr.Name(), err)
	case <-time.After(readyBound):
		t.Fatalf("projector %s not ready within %s", pr.Name(), readyBound)
	}
}

// RunFollower is RunProjector for a Follower.
func RunFollower(t testing.TB, f *eventlog.Follower) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("follower %v: %v", f.Names(), err)
		}
	})
	select {
	case <-f.Ready():
	case err := <-done:
		done <- nil // let the cleanup return
		t.Fatalf("follower %v stopped: %v", f.Names(), err)
	case <-time.After(readyBound):
		t.Fatalf("follower %v not ready within %s", f.Names(), readyBound)
	}
}
