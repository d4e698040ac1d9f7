package chatreplay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

// sandboxStart bounds the start of the throwaway server and its views.
const sandboxStart = 30 * time.Second

// sandbox is the throwaway log a replay writes to: an embedded nats-server
// with its JetStream store, and Pebble, in a temporary directory removed
// by close. The same parts as agentd's, none of them shared with the log
// the recording came from.
type sandbox struct {
	dir     string
	srv     *server.Server
	nc      *nats.Conn
	lg      *eventlog.Log
	table   *fiber.Table
	store   *chat.Store
	batcher *eventlog.Batcher
	cancel  context.CancelFunc
	done    []chan error
}

// openSandbox starts a sandbox; close releases it.
func openSandbox(ctx context.Context, logger *slog.Logger) (_ *sandbox, err error) {
	dir, err := os.MkdirTemp("", "forever-replay-")
	if err != nil {
		return nil, fmt.Errorf("chatreplay: temporary directory: %w", err)
	}
	sb := &sandbox{dir: dir}
	defer func() {
		if err != nil {
			sb.close()
		}
	}()
	sb.srv, err = server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: filepath.Join(dir, "nats"), NoLog: true, NoSigs: true,
		DisableJetStreamBanner: true,
	})
	if err != nil {
		return nil, fmt.Errorf("chatreplay: embedded server: %w", err)
	}
	sb.srv.Start()
	if !sb.srv.ReadyForConnections(sandboxStart) {
		return nil, errors.New("chatreplay: the embedded server did not start")
	}
	if sb.nc, err = nats.Connect(sb.srv.ClientURL(), nats.Name("agentd replay")); err != nil {
		return nil, fmt.Errorf("chatreplay: connect to the embedded server: %w", err)
	}
	octx, cancel := context.WithTimeout(ctx, sandboxStart)
	defer cancel()
	if sb.lg, err = eventlog.Open(octx, eventlog.Config{Conn: sb.nc, Dir: filepath.Join(dir, "pebble"), Logger: logger}); err != nil {
		return nil, fmt.Errorf("chatreplay: open the throwaway log: %w", err)
	}
	table, tpr, err := fiber.OpenTable(sb.lg)
	if err != nil {
		return nil, err
	}
	store, prs, err := chat.OpenStore(sb.lg)
	if err != nil {
		return nil, err
	}
	sb.table, sb.store = table, store
	rctx, rcancel := context.WithCancel(context.Background())
	sb.cancel = rcancel
	sb.batcher = sb.lg.NewBatcher(eventlog.BatcherConfig{})
	sb.run(rctx, sb.batcher.Run)
	for _, pr := range append([]*eventlog.Projector{tpr}, prs...) {
		sb.run(rctx, pr.Run)
		select {
		case <-pr.Ready():
		case <-octx.Done():
			return nil, fmt.Errorf("chatreplay: view %s not ready: %w", pr.Name(), octx.Err())
		}
	}
	return sb, nil
}

// run runs fn until close.
func (sb *sandbox) run(ctx context.Context, fn func(context.Context) error) {
	done := make(chan error, 1)
	sb.done = append(sb.done, done)
	go func() { done <- fn(ctx) }()
}

// close stops everything openSandbox started and removes its directory.
func (sb *sandbox) close() {
	if sb.cancel != nil {
		sb.cancel()
	}
	for _, d := range sb.done {
		<-d
	}
	if sb.lg != nil {
		sb.lg.Close()
	}
	if sb.nc != nil {
		sb.nc.Close()
	}
	if sb.srv != nil {
		sb.srv.Shutdown()
		sb.srv.WaitForShutdown()
	}
	os.RemoveAll(sb.dir)
}
