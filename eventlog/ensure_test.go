package eventlog_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A start whose streams already match its config leaves them alone: no
// stream update is proposed (each is a meta-layer proposal, 2K+2 of them
// per node start on a sharded log); a start whose config changed a setting
// updates the stream.
func TestOpenUpdatesOnlyWhatDiffers(t *testing.T) {
	ctx := t.Context()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	nc := eventlogtest.Connect(t, s)
	var (
		mu      sync.Mutex
		updated []string // the streams of the update advisories, in order
	)
	sub, err := nc.Subscribe("$JS.EVENT.ADVISORY.STREAM.UPDATED.>", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		updated = append(updated, m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	seen := func(stream string) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(updated, stream)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	sentinel := jetstream.StreamConfig{Name: "SENTINEL", Subjects: []string{"sentinel"}}
	if _, err := js.CreateStream(ctx, sentinel); err != nil {
		t.Fatal(err)
	}

	cfg := eventlog.Config{Shards: 2, Partitions: 8}
	eventlogtest.OpenOn(t, s, cfg)
	eventlogtest.OpenOn(t, s, cfg)
	// The server sends its advisories in order: once the sentinel's update
	// is seen, an update of the opens above would have been seen before it.
	sentinel.Description = "updated"
	if _, err := js.UpdateStream(ctx, sentinel); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, "the sentinel stream's update advisory", func() bool { return seen("SENTINEL") })
	mu.Lock()
	if len(updated) != 1 {
		t.Errorf("stream updates on opens whose streams matched: %v, want only SENTINEL", updated)
	}
	mu.Unlock()

	cfg.ChunkSafetyAge = 2 * time.Hour
	eventlogtest.OpenOn(t, s, cfg)
	chunks0 := eventlog.ShardStreamName(eventlog.DefaultChunksStream, 0)
	waitfor.True(t, "a chunks shard's update on an open with a new chunk safety age", func() bool { return seen(chunks0) })
	info, err := js.Stream(ctx, chunks0)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.CachedInfo().Config.MaxAge; got != 2*time.Hour {
		t.Fatalf("chunks stream MaxAge %v after the open, want 2h", got)
	}
}

// A start while the log's streams have no leader (their leader's node just
// lost, the others not yet past their election) opens the log once a
// leader is elected: its lookup is sent again until one answers. Sent
// once, the request reached no leader and the start waited out its whole
// context (a restarted node's attempts of 3 s, twice in a row in the
// chaos runs). Here two of three servers stop, so the streams lose their
// quorum, and one comes back a second into the start.
func TestOpenWhileItsStreamsElect(t *testing.T) {
	srvs := eventlogtest.RunCluster(t, 3)
	ctx := t.Context()
	cfg := eventlog.Config{Replicas: 3}
	lg := eventlogtest.OpenOn(t, srvs[0], cfg)
	lg.Close()
	restart := eventlogtest.StopServers(t, srvs, 1, 2)
	nc := eventlogtest.Connect(t, srvs[0])
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	opened := make(chan error, 1)
	began := time.Now()
	go func() {
		cfg.Conn, cfg.Dir = nc, t.TempDir()
		l, err := eventlog.Open(octx, cfg)
		if err == nil {
			l.Close()
		}
		opened <- err
	}()
	time.Sleep(time.Second)
	restart(1)
	if err := <-opened; err != nil {
		t.Fatalf("open while the streams elect: %v after %s", err, time.Since(began))
	}
	t.Logf("opened %s after the start, a leader elected meanwhile", time.Since(began))
}
