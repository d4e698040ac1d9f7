package agentd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/waitfor"
)

func TestRunServesHealthReadyMetrics(t *testing.T) {
	cfg := agentdtest.Config(t)
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var released bool
	releaseOnce := func() {
		if !released {
			released = true
			close(release)
		}
	}
	var lg *eventlog.Log
	err = d.OnStart(func(ctx context.Context, deps *agentd.Deps) error {
		lg = deps.Log
		// One stored event, so the projector is ready only once it applied it.
		<-deps.Ownership.Ready() // appends are fenced: write as the owner
		if _, err := deps.Log.Append(ctx, eventlog.Event{Agent: "a1", Type: "note.added", Data: []byte(`{}`)}); err != nil {
			return err
		}
		pr, err := deps.Log.NewProjector(eventlog.Projection{
			Name: "notes", Version: 1,
			Apply: func(b *eventlog.Batch, e eventlog.Event) error {
				<-release
				return b.Set([]byte(e.ID), e.Data)
			},
		})
		if err != nil {
			return err
		}
		return d.AddProjector(pr)
	})
	if err != nil {
		t.Fatal(err)
	}
	agentdtest.Start(t, d)
	t.Cleanup(releaseOnce) // runs before the daemon's cleanup, which waits for the projector
	base := "http://" + d.HTTPAddr()

	code, body := agentdtest.Get(t, base+"/healthz")
	if code != http.StatusOK {
		t.Fatalf("/healthz: got %d %s, want 200", code, body)
	}
	var h agentd.Health
	if err := json.Unmarshal([]byte(body), &h); err != nil || h.Status != "ok" || h.NATS != "connected" {
		t.Errorf("/healthz body %s (%v): want status ok, nats connected", body, err)
	}

	code, body = agentdtest.Get(t, base+"/readyz")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before the projection caught up: got %d %s, want 503", code, body)
	}
	if !strings.Contains(body, `"notes":false`) || !strings.Contains(body, `"reasons":["catching up with the log: notes"]`) {
		t.Errorf("/readyz body %s: want notes:false and the reason naming it", body)
	}
	if d.Ready() {
		t.Error("Ready() true before the projection caught up")
	}

	releaseOnce()
	body = agentdtest.WaitStatus(t, base+"/readyz", http.StatusOK)
	if !strings.Contains(body, `"notes":true`) || !strings.Contains(body, `"status":"ready"`) ||
		!strings.Contains(body, `"partitions":64,"assigned":64`) || strings.Contains(body, "reasons") {
		t.Errorf("/readyz body %s: want ready with notes:true, 64 partitions of 64 and no reasons", body)
	}

	code, body = agentdtest.Get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: got %d", code)
	}
	for _, want := range []string{
		"forever_eventlog_events_appended_total",
		"forever_eventlog_projection_cursor",
		"forever_agentd_ready 1",
		"forever_agentd_nats_connected 1",
		`forever_agentd_ready_reason{reason="starting"} 0`,
		`forever_agentd_ready_reason{reason="partitions"} 0`,
		`forever_agentd_degraded{reason="store_full"} 0`,
		"forever_jetstream_store_max_bytes 1.073741824e+10",
		"forever_jetstream_memory_max_bytes 2.68435456e+08",
		"forever_jetstream_meta_leader 1",
		"go_goroutines",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// Other clients reach the embedded server on its listen address.
	nc, err := nats.Connect(d.NATSURL())
	if err != nil {
		t.Fatalf("connect to %s: %v", d.NATSURL(), err)
	}
	defer nc.Close()
	if _, err := lg.LastSeq(t.Context(), eventlog.Filter{}); err != nil {
		t.Errorf("LastSeq: %v", err)
	}
}

func TestRunAddsComponentsAndHandlers(t *testing.T) {
	d, err := agentd.New(agentdtest.Config(t))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{})
	stopped := make(chan struct{})
	if err := d.Add("ticker", agentd.ComponentFunc(func(ctx context.Context) error {
		close(ran)
		<-ctx.Done()
		close(stopped)
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	d.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hi") })
	stop := agentdtest.Start(t, d)
	<-ran
	if code, body := agentdtest.Get(t, "http://"+d.HTTPAddr()+"/hello"); code != 200 || body != "hi" {
		t.Errorf("/hello: got %d %q", code, body)
	}
	if err := d.Add("late", agentd.ComponentFunc(func(context.Context) error { return nil })); !errors.Is(err, agentd.ErrStarted) {
		t.Errorf("Add after start: got %v, want agentd.ErrStarted", err)
	}
	if err := d.Run(t.Context()); !errors.Is(err, agentd.ErrStarted) {
		t.Errorf("second Run: got %v, want agentd.ErrStarted", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	select {
	case <-stopped:
	default:
		t.Error("component still running after Run returned")
	}
}

func TestRunComponentErrorStopsDaemon(t *testing.T) {
	d, err := agentd.New(agentdtest.Config(t))
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	fail := make(chan struct{})
	d.Add("failing", agentd.ComponentFunc(func(ctx context.Context) error {
		select {
		case <-fail:
			return boom
		case <-ctx.Done():
			return nil
		}
	}))
	done := make(chan error, 1)
	go func() { done <- d.Run(t.Context()) }()
	<-d.Started()
	close(fail)
	select {
	case err := <-done:
		if !errors.Is(err, boom) || !strings.Contains(err.Error(), "agentd: failing: boom") {
			t.Errorf("got %v, want agentd: failing: boom", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after a component failed")
	}
}

func TestRunStartFuncErrorTearsDown(t *testing.T) {
	cfg := agentdtest.Config(t)
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	d.OnStart(func(context.Context, *agentd.Deps) error { return boom })
	if err := d.Run(t.Context()); !errors.Is(err, boom) {
		t.Fatalf("got %v, want boom", err)
	}
	// Everything was closed: the same data dir opens again.
	d2, err := agentd.New(agentd.Config{DataDir: cfg.DataDir, HTTPAddr: cfg.HTTPAddr, NATSListen: cfg.NATSListen, Logger: cfg.Logger})
	if err != nil {
		t.Fatal(err)
	}
	agentdtest.Start(t, d2)
}

func TestGracefulShutdownAndReopen(t *testing.T) {
	cfg := agentdtest.Config(t)
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var seq eventlog.Seq
	d.OnStart(func(ctx context.Context, deps *agentd.Deps) error {
		var err error
		<-deps.Ownership.Ready() // appends are fenced: write as the owner
		seq, err = deps.Log.Append(ctx, eventlog.Event{Agent: "a1", Type: "note.added", Data: []byte(`{"n":1}`)})
		return err
	})
	stop := agentdtest.Start(t, d)
	if err := stop(); err != nil {
		t.Fatalf("Run after cancel: got %v, want nil", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "jetstream")); err != nil {
		t.Errorf("jetstream dir: %v", err)
	}

	// Reopen the same data dir: the event is still there.
	d2, err := agentd.New(agentd.Config{DataDir: cfg.DataDir, HTTPAddr: "127.0.0.1:0", NATSListen: "127.0.0.1:0", Logger: cfg.Logger})
	if err != nil {
		t.Fatal(err)
	}
	var last eventlog.Seq
	d2.OnStart(func(ctx context.Context, deps *agentd.Deps) error {
		var err error
		last, err = deps.Log.LastSeq(ctx, eventlog.Filter{Agent: "a1"})
		return err
	})
	agentdtest.Start(t, d2)
	if last != seq {
		t.Errorf("after reopen: last seq %d, want %d", last, seq)
	}
}

// A taken port fails Run with ErrAddrInUse and a message naming the flag
// and the variable to change.
func TestRunAddrInUse(t *testing.T) {
	for _, tt := range []struct {
		name string
		set  func(cfg *agentd.Config, addr string)
		want string // %s: the address
	}{
		{"http", func(cfg *agentd.Config, addr string) { cfg.HTTPAddr = addr },
			"agentd: http address %s is in use (set --http or FOREVER_HTTP)"},
		{"nats", func(cfg *agentd.Config, addr string) { cfg.NATSListen = addr },
			"agentd: nats listen address %s is in use (set --nats-listen or FOREVER_NATS_LISTEN)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			cfg := agentdtest.Config(t)
			tt.set(&cfg, ln.Addr().String())
			d, err := agentd.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = d.Run(t.Context())
			if !errors.Is(err, agentd.ErrAddrInUse) {
				t.Fatalf("got %v, want agentd.ErrAddrInUse", err)
			}
			if want := fmt.Sprintf(tt.want, ln.Addr().String()); err.Error() != want {
				t.Errorf("message:\n got %q\nwant %q", err.Error(), want)
			}
		})
	}
}

func TestRunDataDirUnusable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		dir  string
		want string
	}{
		{"is a file", file, "agentd: data dir " + file + " is a file, not a directory (set --data or FOREVER_DATA)"},
		{"under a file", filepath.Join(file, "sub"), "agentd: data dir " + filepath.Join(file, "sub") + ": not a directory (set --data or FOREVER_DATA)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := agentdtest.Config(t)
			cfg.DataDir = tt.dir
			d, err := agentd.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = d.Run(t.Context())
			if !errors.Is(err, agentd.ErrDataDir) {
				t.Fatalf("got %v, want agentd.ErrDataDir", err)
			}
			if err.Error() != tt.want {
				t.Errorf("message:\n got %q\nwant %q", err.Error(), tt.want)
			}
		})
	}
}

func TestRunDataDirNotWritable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root can write to read-only directories")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o700) })
	cfg := agentdtest.Config(t)
	cfg.DataDir = dir
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = d.Run(t.Context())
	if !errors.Is(err, agentd.ErrDataDir) || !strings.Contains(err.Error(), "is not writable") {
		t.Fatalf("got %v, want agentd.ErrDataDir saying not writable", err)
	}
}

func TestRunSyncModes(t *testing.T) {
	tests := []struct {
		sync     string
		always   bool
		warnings int
	}{
		{agentd.SyncAlways, true, 0},
		{agentd.SyncInterval, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.sync, func(t *testing.T) {
			cfg := agentdtest.Config(t)
			cfg.Sync = tt.sync
			var logs agentdtest.SyncBuffer
			cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			d, err := agentd.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var jsDir string
			var always bool
			d.OnStart(func(_ context.Context, deps *agentd.Deps) error {
				jsc := deps.Server.JetStreamConfig()
				jsDir, always = jsc.StoreDir, jsc.SyncAlways
				return nil
			})
			agentdtest.Start(t, d)
			if always != tt.always {
				t.Errorf("JetStream SyncAlways: got %v, want %v", always, tt.always)
			}
			if want := filepath.Join(cfg.DataDir, "jetstream"); jsDir != want {
				t.Errorf("JetStream store dir: got %s, want %s", jsDir, want)
			}
			if got := strings.Count(logs.String(), "acknowledged writes can be lost on power failure"); got != tt.warnings {
				t.Errorf("durability warnings: got %d, want %d\n%s", got, tt.warnings, logs.String())
			}
		})
	}
}

func TestRunExternalNATS(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{SyncAlways: true})
	cfg := agentdtest.Config(t)
	cfg.NATSURL = s.ClientURL()
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var embedded bool
	d.OnStart(func(_ context.Context, deps *agentd.Deps) error {
		embedded = deps.Server != nil
		return nil
	})
	agentdtest.Start(t, d)
	if embedded {
		t.Error("an embedded server runs although --nats-url is set")
	}
	if got, want := d.NATSURL(), s.ClientURL(); got != want {
		t.Errorf("NATSURL: got %s, want %s", got, want)
	}
	agentdtest.WaitStatus(t, "http://"+d.HTTPAddr()+"/readyz", http.StatusOK)
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "jetstream")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("jetstream dir in the data dir with an external NATS: %v", err)
	}
}

func TestRunExternalNATSUnreachable(t *testing.T) {
	cfg := agentdtest.Config(t)
	cfg.NATSURL = "nats://" + agentdtest.FreeAddr(t)
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = d.Run(t.Context())
	if !errors.Is(err, agentd.ErrNATS) {
		t.Fatalf("got %v, want agentd.ErrNATS", err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "agentd: connect to NATS at "+cfg.NATSURL) ||
		!strings.HasSuffix(msg, "(set --nats-url or FOREVER_NATS_URL)") {
		t.Errorf("message %q", msg)
	}
}

// TestReadyWhileStarting: Ready may be called while Run is starting (a
// program embedding the daemon polls it); under -race this catches
// readiness reading what startup writes.
func TestReadyWhileStarting(t *testing.T) {
	d, err := agentd.New(agentdtest.Config(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for !d.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("never ready")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestGuardHealsADeletedStream: a stream of the log deleted under the
// running daemon is noticed within seconds, logged once at ERROR naming
// it, counted, and created again; /readyz is 200 again (it is 503 with a
// reason naming the stream while the heal runs: see TestBinary/DeleteEvents).
func TestGuardHealsADeletedStream(t *testing.T) {
	cfg := agentdtest.Config(t)
	var logs agentdtest.SyncBuffer
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	agentdtest.Start(t, d)
	base := "http://" + d.HTTPAddr()
	agentdtest.WaitStatus(t, base+"/readyz", http.StatusOK)
	nc, err := nats.Connect(d.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if err := js.DeleteStream(t.Context(), "FOREVER_CHUNKS"); err != nil {
		t.Fatal(err)
	}
	waitLog(t, &logs, `"level":"ERROR","msg":"stream FOREVER_CHUNKS was deleted under the running node`)
	waitLog(t, &logs, `"msg":"stream created again","subsystem":"eventlog","stream":"FOREVER_CHUNKS"`)
	if _, err := js.Stream(t.Context(), "FOREVER_CHUNKS"); err != nil {
		t.Errorf("FOREVER_CHUNKS after the heal: %v", err)
	}
	agentdtest.WaitStatus(t, base+"/readyz", http.StatusOK)
	_, body := agentdtest.Get(t, base+"/metrics")
	if !strings.Contains(body, `forever_agentd_ready_reason{reason="store_missing"} 0`) ||
		!strings.Contains(body, `forever_agentd_store_faults_total{kind="deleted",store="FOREVER_CHUNKS"} 1`) {
		t.Errorf("metrics after the chunks stream was deleted lack the fault:\n%s", grepLines(body, "forever_agentd"))
	}
	if n := strings.Count(logs.String(), "FOREVER_CHUNKS was deleted"); n != 1 {
		t.Errorf("the loss was logged %d times, want once:\n%s", n, logs.String())
	}
}

// TestGuardHealsDeletedShardsTogether: the events shards of a sharded log
// deleted one after another under the running daemon (as a restore, or its
// undo, deletes them) are all created again by the first shard's heal, so
// no heal waits for views that follow a shard still missing: none fails,
// each shard is back and /readyz is 200 again.
func TestGuardHealsDeletedShardsTogether(t *testing.T) {
	cfg := agentdtest.Config(t)
	cfg.Shards = 4
	var logs agentdtest.SyncBuffer
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Views, and events in several shards: a heal waits for the views to
	// catch up with every shard.
	err = d.OnStart(func(ctx context.Context, deps *agentd.Deps) error {
		<-deps.Ownership.Ready() // appends are fenced: write as the owner
		for i := range 16 {
			if _, err := deps.Log.Append(ctx, eventlog.Event{Agent: fmt.Sprintf("a%d", i), Type: "note.added", Data: []byte(`{}`)}); err != nil {
				return err
			}
		}
		pr, err := deps.Log.NewProjector(eventlog.Projection{Name: "notes", Version: 1,
			Apply: func(b *eventlog.Batch, e eventlog.Event) error { return b.Set([]byte(e.ID), e.Data) }})
		if err != nil {
			return err
		}
		return d.AddProjector(pr)
	})
	if err != nil {
		t.Fatal(err)
	}
	agentdtest.Start(t, d)
	base := "http://" + d.HTTPAddr()
	agentdtest.WaitStatus(t, base+"/readyz", http.StatusOK)
	nc, err := nats.Connect(d.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for k := range cfg.Shards {
		if err := js.DeleteStream(t.Context(), eventlog.ShardStreamName(eventlog.DefaultEventsStream, k)); err != nil {
			t.Fatal(err)
		}
	}
	// The first heal (of whichever shard the guard saw first) creates
	// them all; a shard created again before its own guard looked is
	// the same empty stream to it, with nothing to heal.
	// A shard the test deleted after that heal made it again is healed
	// by its own guard, which holds the heal of a stream deleted again
	// for a second or more: each is waited for, not read at once.
	waitLog(t, &logs, `healed","subsystem":"guard","store":"FOREVER_EVENTS_`)
	for k := range cfg.Shards {
		name := eventlog.ShardStreamName(eventlog.DefaultEventsStream, k)
		waitfor.True(t, name+" back after the heal", func() bool {
			_, err := js.Stream(t.Context(), name)
			return err == nil
		})
	}
	agentdtest.WaitStatus(t, base+"/readyz", http.StatusOK)
	// A heal that waited for a shard still missing fails; one whose
	// create the server refused while it still removed the deleted
	// stream's files (500, err_code 10049, "error creating store") is
	// transient, and the guard tries it again.
	var waited []string
	for _, l := range strings.Split(grepLines(logs.String(), "failed; trying again"), "\n") {
		if l != "" && !strings.Contains(l, "err_code=10049") {
			waited = append(waited, l)
		}
	}
	if len(waited) > 0 {
		t.Errorf("a heal failed: it waited for a shard still missing:\n%s", strings.Join(waited, "\n"))
	}
}

// waitLog waits until logs holds want.
func waitLog(t *testing.T, logs *agentdtest.SyncBuffer, want string) {
	t.Helper()
	waitfor.NoError(t, func() error {
		if s := logs.String(); !strings.Contains(s, want) {
			return fmt.Errorf("%q in the log:\n%s", want, s)
		}
		return nil
	})
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
