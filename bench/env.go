package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/freeport"
	"github.com/forever-agents/forever/internal/inproc"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// SyncMode is how the embedded server syncs JetStream writes to disk.
type SyncMode string

const (
	// SyncAlways fsyncs every write before acknowledging it (agentd's default).
	SyncAlways SyncMode = "always"
	// SyncInterval is nats-server's default: fsync every 2 minutes.
	SyncInterval SyncMode = "interval"
)

// EnvConfig configures an Env. A zero field means "use the default".
type EnvConfig struct {
	// Mode is the JetStream sync mode. Default SyncAlways.
	Mode SyncMode
	// Scale multiplies every scenario's message counts. Default 1.
	Scale float64
	// Dir is where the temp dirs go. Default os.TempDir().
	Dir string
	// TCP connects over loopback TCP instead of in-process.
	TCP bool
	// Nodes is the number of servers. Above 1 they form an in-process
	// cluster on loopback, and every stream (the logs' and the raw
	// baselines') has min(Nodes, 3) replicas. Default 1.
	Nodes int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// BlockProfileRate is the servers' runtime.SetBlockProfileRate, which
	// an embedded nats-server sets on start (-blockprofile); 0: off.
	BlockProfileRate int
	// Agentd builds the agentd binary for the scenarios that run it, once
	// per run when the Envs of every mode share it. Nil: the Env builds
	// its own under its temp dir on first use.
	Agentd *agentdBuild
	// Temporal is the Temporal CLI binary the temporal scenario compares
	// with; empty skips that scenario.
	Temporal string
	// LeaseTTL overrides the chart's lease TTL in the failover scenario;
	// zero keeps the chart's.
	LeaseTTL time.Duration
	// CPUQuota is the CPU each node of the scale-out and restart-share
	// scenarios may use (its cgroup's cpu.cfs_quota_us over
	// cpu.cfs_period_us); zero: 0.25; below 0: scale-out skips, and
	// restart-share's nodes run without a quota.
	CPUQuota float64
	// AgentdFlags are flags the scale-out, failover and restart-share
	// scenarios add to every node's chart flags, such as --shards 1 (the
	// unsharded layout: without it a new cluster gets agentd's default 8
	// shards).
	AgentdFlags []string
	// NodeProfiles, when set, is a dir where the scale-out scenario writes
	// a CPU profile of each node (agentd --pprof) over its measured window.
	NodeProfiles string
	// WindowProfile, when set, is a file name: scenarios write a CPU
	// profile of each of their timed windows (Env.profiled) to it plus
	// ".1", ".2", and so on.
	WindowProfile string
}

// Validate checks the config after defaults are applied.
func (c *EnvConfig) Validate() error {
	if c.Mode != SyncAlways && c.Mode != SyncInterval {
		return fmt.Errorf("bench: sync mode %q: want always or interval", c.Mode)
	}
	if c.Nodes < 1 || c.Nodes > 5 {
		return fmt.Errorf("bench: nodes %d: want 1 to 5", c.Nodes)
	}
	if c.Scale <= 0 || math.IsInf(c.Scale, 0) || math.IsNaN(c.Scale) {
		return fmt.Errorf("bench: scale %v: want a positive number", c.Scale)
	}
	return nil
}

func (c *EnvConfig) ensureDefaults() {
	if c.Mode == "" {
		c.Mode = SyncAlways
	}
	if c.Nodes == 0 {
		c.Nodes = 1
	}
	if c.Scale == 0 {
		c.Scale = 1
	}
	if c.Dir == "" {
		c.Dir = os.TempDir()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Env is what scenarios measure on: one fresh embedded nats-server with
// JetStream in one sync mode, a connection to it, and scratch space. Close
// releases everything opened through it. An Env is used by one scenario at a
// time.
type Env struct {
	Mode   SyncMode
	Server *server.Server
	Conn   *nats.Conn
	// JS is a JetStream context on Conn with default options.
	JS     jetstream.JetStream
	Logger *slog.Logger

	cfg     EnvConfig
	dir     string
	next    int
	windows int            // CPU profile windows written (profiled)
	closers []func() error // run in reverse order by Close
}

// StartEnv starts a server storing under a new temp dir and connects to it.
func StartEnv(ctx context.Context, cfg EnvConfig) (*Env, error) {
	cfg.ensureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(cfg.Dir, "forever-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: temp dir: %w", err)
	}
	e := &Env{Mode: cfg.Mode, Logger: cfg.Logger, cfg: cfg, dir: dir}
	e.closers = append(e.closers, func() error { return os.RemoveAll(dir) })
	if err := e.start(ctx); err != nil {
		return nil, errors.Join(err, e.Close())
	}
	return e, nil
}

func (e *Env) start(ctx context.Context) error {
	servers, err := e.startServers()
	if err != nil {
		return err
	}
	s := servers[0]
	e.Server = s
	var copts []nats.Option
	if !e.cfg.TCP {
		copts = append(copts, inproc.Server(s))
	}
	nc, err := nats.Connect(s.ClientURL(), copts...)
	if err != nil {
		return fmt.Errorf("bench: connect: %w", err)
	}
	e.closers = append(e.closers, func() error { nc.Close(); return nil })
	e.Conn = nc
	if e.JS, err = jetstream.New(nc); err != nil {
		return fmt.Errorf("bench: jetstream: %w", err)
	}
	// Wait until JetStream answers (a cluster elects its meta leader
	// first), so the first scenario does not time its start-up.
	deadline := time.Now().Add(60 * time.Second)
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := e.JS.AccountInfo(actx)
		if err == nil {
			err = e.anchor(actx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("bench: jetstream not ready: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// replicas is the replica count of every stream the Env's scenarios create.
func (e *Env) replicas() int { return min(e.cfg.Nodes, 3) }

// startServers starts one server, or Nodes servers clustered on loopback.
func (e *Env) startServers() ([]*server.Server, error) {
	n := e.cfg.Nodes
	clusterPorts := make([]int, n)
	var routes []*url.URL
	if n > 1 {
		for i := range clusterPorts {
			// Reserved while the bench runs: a server restarts on it.
			port, _, err := freeport.ReservePort()
			if err != nil {
				return nil, fmt.Errorf("bench: pick a route port: %w", err)
			}
			clusterPorts[i] = port
			routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", clusterPorts[i])})
		}
	}
	var out []*server.Server
	for i := range n {
		opts := &server.Options{
			ServerName:         fmt.Sprintf("bench-%d", i),
			Host:               "127.0.0.1",
			Port:               -1,
			JetStream:          true,
			StoreDir:           filepath.Join(e.dir, fmt.Sprintf("jetstream-%d", i)),
			JetStreamMaxMemory: 64 << 20,
			NoSigs:             true,
			SyncAlways:         e.Mode == SyncAlways,
			ProfBlockRate:      e.cfg.BlockProfileRate,
		}
		if n > 1 {
			opts.Cluster = server.ClusterOpts{Name: "bench", Host: "127.0.0.1", Port: clusterPorts[i]}
			opts.Routes = routes
		}
		s, err := server.NewServer(opts)
		if err != nil {
			return nil, fmt.Errorf("bench: nats server: %w", err)
		}
		// Warnings and errors only: they name causes the API errors leave
		// out (a failed stream create says "error creating store for
		// stream").
		s.SetLoggerV2(serverLog{l: e.Logger}, false, false, false)
		s.Start()
		e.closers = append(e.closers, func() error { s.Shutdown(); s.WaitForShutdown(); return nil })
		out = append(out, s)
	}
	for _, s := range out {
		if !s.ReadyForConnections(10 * time.Second) {
			return nil, errors.New("bench: nats server not ready after 10s")
		}
	}
	return out, nil
}

// anchor creates a stream that lives as long as the Env. Scenarios delete
// their streams when they end; when the account's last stream goes,
// nats-server removes the account's empty store dir in a goroutine, and a
// stream created at that moment fails with "could not create storage
// directory" (its MkdirAll loses the race). One stream that is never
// deleted keeps that dir in place.
func (e *Env) anchor(ctx context.Context) error {
	_, err := e.JS.CreateStream(ctx, jetstream.StreamConfig{
		Name:     "BENCH_ANCHOR",
		Subjects: []string{"bench-anchor"},
		Storage:  jetstream.FileStorage,
		Replicas: e.replicas(),
	})
	if err != nil {
		return fmt.Errorf("bench: create anchor stream: %w", err)
	}
	return nil
}

// Close releases everything the Env opened, newest first, and removes its
// temp dir.
func (e *Env) Close() error {
	var errs []error
	for i := len(e.closers) - 1; i >= 0; i-- {
		errs = append(errs, e.closers[i]())
	}
	e.closers = nil
	return errors.Join(errs...)
}

// Count returns a scenario's message count for this mode, scaled by -n:
// always under SyncAlways, interval under SyncInterval. It is at least 1.
func (e *Env) Count(always, interval int) int {
	n := always
	if e.Mode == SyncInterval {
		n = interval
	}
	return max(1, int(math.Round(float64(n)*e.cfg.Scale)))
}

// AgentdBinary returns the path of the agentd binary built from this
// module, building it on the first call.
func (e *Env) AgentdBinary(ctx context.Context) (string, error) {
	if e.cfg.Agentd == nil {
		e.cfg.Agentd = &agentdBuild{dir: e.dir}
	}
	return e.cfg.Agentd.binary(ctx)
}

// id returns a fresh token naming streams and dirs, unique within the Env.
func (e *Env) id() string {
	e.next++
	return strconv.Itoa(e.next)
}

// TempDir returns a new empty dir under the Env's temp dir.
func (e *Env) TempDir() (string, error) {
	dir := filepath.Join(e.dir, "d"+e.id())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	return dir, nil
}

// OpenLog opens an eventlog.Log with its own prefix and streams and Pebble
// under a new temp dir. It returns a release func that closes it and deletes
// its streams; call it when the scenario is done.
func (e *Env) OpenLog(ctx context.Context) (*eventlog.Log, func(), error) {
	cfg, err := e.LogConfig()
	if err != nil {
		return nil, nil, err
	}
	lg, err := eventlog.Open(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	release := func() {
		lg.Close()
		e.DropLog(cfg)
	}
	return lg, release, nil
}

// LogConfig returns the config of a new Log: its own prefix and streams, and
// Pebble under a new temp dir. Opening it twice, with another Dir the second
// time, is how a scenario restarts a process. DropLog deletes what it names.
func (e *Env) LogConfig() (eventlog.Config, error) {
	id := e.id()
	dir, err := e.TempDir()
	if err != nil {
		return eventlog.Config{}, err
	}
	return eventlog.Config{
		Conn:         e.Conn,
		Prefix:       "bench" + id,
		EventsStream: "BENCH" + id + "_EVENTS",
		ChunksStream: "BENCH" + id + "_CHUNKS",
		Dir:          dir,
		Replicas:     e.replicas(),
		// As agentd does: atomic batches only pay off when every write is
		// fsynced.
		AsyncBatches: e.Mode == SyncInterval,
		Logger:       e.Logger,
	}, nil
}

// DropLog deletes the streams and the Pebble dir of cfg; close every Log
// opened with it first.
func (e *Env) DropLog(cfg eventlog.Config) {
	e.deleteStream(cfg.EventsStream)
	e.deleteStream(cfg.ChunksStream)
	os.RemoveAll(cfg.Dir)
}

// OpenLogAndRaw opens a Log as OpenLog does and a raw stream as RawStream
// does, for a scenario that times the log beside raw JetStream. The release
// func deletes both.
func (e *Env) OpenLogAndRaw(ctx context.Context) (lg *eventlog.Log, rawPrefix string, release func(), err error) {
	lg, releaseLog, err := e.OpenLog(ctx)
	if err != nil {
		return nil, "", nil, err
	}
	rawPrefix, releaseRaw, err := e.RawStream(ctx)
	if err != nil {
		releaseLog()
		return nil, "", nil, err
	}
	return lg, rawPrefix, func() { releaseRaw(); releaseLog() }, nil
}

// RawStream creates a stream configured like the event log's events stream
// (file storage, one replica, 2m duplicate window, atomic batches allowed) on
// subjects <prefix>.>, for raw JetStream baselines. It returns the prefix,
// whose upper case is the stream's name, and a release func that deletes the
// stream.
func (e *Env) RawStream(ctx context.Context) (string, func(), error) {
	id := e.id()
	name, prefix := "RAW"+id, "raw"+id
	_, err := e.JS.CreateStream(ctx, jetstream.StreamConfig{
		Name:               name,
		Subjects:           []string{prefix + ".>"},
		Storage:            jetstream.FileStorage,
		Replicas:           e.replicas(),
		Duplicates:         eventlog.DefaultDuplicates,
		AllowAtomicPublish: true,
		AllowDirect:        true,
	})
	if err != nil {
		return "", nil, fmt.Errorf("bench: create stream %s: %w", name, err)
	}
	return prefix, func() { e.deleteStream(name) }, nil
}

// deleteStream removes a stream so the next scenario starts on an idle
// store. Errors are logged: a leftover stream only costs disk.
func (e *Env) deleteStream(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.JS.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		e.Logger.Warn("delete stream", "stream", name, "err", err)
	}
}

// OpenPebble opens a Pebble database under a new temp dir, for raw Pebble
// baselines. The release func closes it and removes the dir.
func (e *Env) OpenPebble() (*pebble.DB, func(), error) {
	dir, err := e.TempDir()
	if err != nil {
		return nil, nil, err
	}
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietPebble{}})
	if err != nil {
		return nil, nil, fmt.Errorf("bench: open pebble: %w", err)
	}
	return db, func() { db.Close(); os.RemoveAll(dir) }, nil
}

// quietPebble drops Pebble's informational log lines.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)              {}
func (quietPebble) Errorf(format string, args ...any) { slog.Error(fmt.Sprintf(format, args...)) }
func (quietPebble) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// serverLog passes nats-server's warnings and errors to slog; with
// noWarn, only errors.
type serverLog struct {
	l      *slog.Logger
	noWarn bool
}

func (s serverLog) Noticef(string, ...any) {}
func (s serverLog) Debugf(string, ...any)  {}
func (s serverLog) Tracef(string, ...any)  {}
func (s serverLog) Warnf(format string, v ...any) {
	if s.noWarn {
		return
	}
	s.l.Warn(fmt.Sprintf(format, v...), "component", "nats-server")
}
func (s serverLog) Errorf(format string, v ...any) {
	s.l.Error(fmt.Sprintf(format, v...), "component", "nats-server")
}
func (s serverLog) Fatalf(format string, v ...any) {
	s.l.Error(fmt.Sprintf(format, v...), "component", "nats-server")
}
