package ownership

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// serving records which node serves which partition, and fails the test if
// two serve one partition at once.
type serving struct {
	t  *testing.T
	mu sync.Mutex
	by map[int]string
	// causes records why each node's partitions stopped.
	causes map[string][]error
}

func newServing(t *testing.T) *serving {
	return &serving{t: t, by: map[int]string{}, causes: map[string][]error{}}
}

func (s *serving) serve(node string) func(context.Context, Lease) {
	return func(ctx context.Context, l Lease) {
		s.mu.Lock()
		if other, ok := s.by[l.Partition]; ok {
			s.t.Errorf("partition %d served by %s and %s at once", l.Partition, other, node)
		}
		s.by[l.Partition] = node
		s.mu.Unlock()
		<-ctx.Done()
		s.mu.Lock()
		delete(s.by, l.Partition)
		s.causes[node] = append(s.causes[node], context.Cause(ctx))
		s.mu.Unlock()
	}
}

func (s *serving) count(node string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.by {
		if v == node {
			n++
		}
	}
	return n
}

type node struct {
	m      *Manager
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan error
}

func startNode(t *testing.T, s *server.Server, cfg Config) *node {
	t.Helper()
	return startNodeWith(t, s, cfg, nil)
}

// startNodeWith is startNode, calling before (when set) with the manager
// before it runs.
func startNodeWith(t *testing.T, s *server.Server, cfg Config, before func(*Manager)) *node {
	t.Helper()
	nc := eventlogtest.Connect(t, s)
	cfg.Conn = nc
	m, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{m: m, nc: nc, cancel: cancel, done: make(chan error, 1)}
	go func() { n.done <- m.Run(ctx) }()
	t.Cleanup(func() { n.stop(t) })
	<-m.Ready()
	return n
}

func (n *node) stop(t *testing.T) {
	n.cancel()
	if err := <-n.done; err != nil {
		t.Error(err)
	}
	n.done <- nil
}

// eventually polls cond up to a generous bound (not a timing assertion: it
// only keeps a broken test from hanging).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitfor.True(t, what, cond)
}

func TestOneNodeTakesAll(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	sv := newServing(t)
	a := startNode(t, s, Config{Node: "a", Partitions: 8, TTL: 2 * time.Second, Serve: sv.serve("a")})
	if got := a.m.OwnedCount(); got != 8 {
		t.Fatalf("owns %d partitions, want 8", got)
	}
	for p := range 8 {
		l, ctx, ok := a.m.Owned(p)
		if !ok || ctx.Err() != nil || l.Node != "a" || l.Epoch == 0 {
			t.Fatalf("partition %d: %+v %v", p, l, ok)
		}
		if o, ok := a.m.Owner(p); !ok || o != l {
			t.Fatalf("Owner(%d) = %+v, want %+v", p, o, l)
		}
	}
}

// TestJoinAndLeave: a node that joins takes its share by handoff, a node
// that stops hands everything off, and no partition is ever served twice.
// The TTL is long, so only handoffs (not expiry) can move partitions in
// the test's time.
func TestJoinAndLeave(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	sv := newServing(t)
	cfg := func(name string) Config {
		return Config{Node: name, Partitions: 16, TTL: 60 * time.Second, RenewEvery: 200 * time.Millisecond, Serve: sv.serve(name)}
	}
	logs := &infoLog{}
	ac := cfg("a")
	ac.Logger = slog.New(logs)
	a := startNode(t, s, ac)
	b := startNode(t, s, cfg("b"))
	eventually(t, "a and b split 16 partitions", func() bool {
		return sv.count("a") == 8 && sv.count("b") == 8 && a.m.OwnedCount() == 8 && b.m.OwnedCount() == 8
	})
	// The rebalance is one INFO line of a's, not one per partition.
	if got := logs.messages(); len(got) != 2 || got[0] != "partition leases taken" || got[1] != "partitions rebalanced" {
		t.Errorf("a's INFO lines while b joined: %q, want the leases taken, then one rebalance", got)
	}
	for _, n := range []*node{a, b} {
		if got, starved := n.m.Assigned(), n.m.Starved(); got != 8 || starved != 0 {
			t.Errorf("%s: assigned %d, starved %s; want 8 and 0", n.m.Node(), got, starved)
		}
	}
	a.stop(t)
	eventually(t, "b serves all 16 after a stopped", func() bool { return sv.count("b") == 16 })
	for _, c := range sv.causes["a"] {
		if !errors.Is(c, ErrHandoff) {
			t.Errorf("a stopped a partition with cause %v, want ErrHandoff", c)
		}
	}
}

// TestExpiryBeforeTakeover: a node cut off from NATS stops serving its
// partitions (its watchdog) before the other node can acquire them.
func TestExpiryBeforeTakeover(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	var mu sync.Mutex
	var events []string
	serve := func(name string) func(context.Context, Lease) {
		return func(ctx context.Context, l Lease) {
			mu.Lock()
			events = append(events, name+" start")
			mu.Unlock()
			<-ctx.Done()
			mu.Lock()
			events = append(events, name+" stop "+causeLabel(context.Cause(ctx)))
			mu.Unlock()
		}
	}
	a := startNode(t, s, Config{Node: "a", Partitions: 1, TTL: 2 * time.Second, Serve: serve("a")})
	a.nc.Close()
	b := startNode(t, s, Config{Node: "b", Partitions: 1, TTL: 2 * time.Second, Serve: serve("b")})
	eventually(t, "b acquires the partition", func() bool { return b.m.OwnedCount() == 1 })
	mu.Lock()
	defer mu.Unlock()
	want := []string{"a start", "a stop expired", "b start"}
	if len(events) < 3 || events[0] != want[0] || events[1] != want[1] || events[2] != want[2] {
		t.Fatalf("events %q, want %q", events, want)
	}
	if _, _, ok := a.m.Owned(0); ok {
		t.Fatal("a still says it owns the partition")
	}
}

// TestRestartTakesBack: a node that restarts under its name takes its
// leases back at once, with newer epochs, instead of waiting for the TTL.
func TestRestartTakesBack(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	cfg := Config{Node: "a", Partitions: 4, TTL: 60 * time.Second}
	old := startNode(t, s, cfg)
	before, _, _ := old.m.Owned(0)
	old.nc.Close() // a crash: nothing handed off
	a := startNode(t, s, cfg)
	eventually(t, "a takes its 4 leases back", func() bool { return a.m.OwnedCount() == 4 })
	after, _, _ := a.m.Owned(0)
	if after.Epoch <= before.Epoch {
		t.Fatalf("epoch %d after restart, was %d", after.Epoch, before.Epoch)
	}
}

func TestCheckDropsALostLease(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	a := startNode(t, s, Config{Node: "a", Partitions: 2, TTL: 60 * time.Second})
	_, ctx, ok := a.m.Owned(1)
	if !ok {
		t.Fatal("a does not own partition 1")
	}
	// Another writer takes the key (as a node would after an expiry).
	if _, err := a.m.kv.Put(context.Background(), leaseKey(1), []byte(`{"node":"b"}`)); err != nil {
		t.Fatal(err)
	}
	if err := a.m.Check(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := a.m.Owned(1); ok {
		t.Fatal("a still owns partition 1 after Check")
	}
	if !errors.Is(context.Cause(ctx), ErrLeaseLost) {
		t.Fatalf("cause %v, want ErrLeaseLost", context.Cause(ctx))
	}
	if _, _, ok := a.m.Owned(0); !ok {
		t.Fatal("a lost partition 0 too")
	}
}

func TestPartitionMismatch(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	startNode(t, s, Config{Node: "a", Partitions: 8})
	_, err := New(context.Background(), Config{Conn: eventlogtest.Connect(t, s), Node: "b", Partitions: 16})
	if !errors.Is(err, ErrPartitionMismatch) {
		t.Fatalf("got %v, want ErrPartitionMismatch", err)
	}
}

// TestDeadHolderWithoutServerExpiry: the keys of a node that died are
// still on the server (written here without a TTL, as if the server's
// expiry were late). A live node takes its partitions once it has seen
// nothing of it for a TTL, instead of waiting for the server.
func TestDeadHolderWithoutServerExpiry(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	b := startNode(t, s, Config{Node: "b", Partitions: 4, TTL: 2 * time.Second})
	b.stop(t) // hands its leases off: the bucket is empty, the count stored
	ctx := context.Background()
	if _, err := b.m.kv.Put(ctx, prefixNode+"ghost", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	for p := range 4 {
		if _, err := b.m.kv.Put(ctx, leaseKey(p), []byte(`{"node":"ghost","epoch":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	c := startNode(t, s, Config{Node: "c", Partitions: 4, TTL: 2 * time.Second})
	eventually(t, "c takes the ghost's 4 partitions", func() bool { return c.m.OwnedCount() == 4 })
	for p := range 4 {
		if l, _, _ := c.m.Owned(p); l.Node != "c" || l.Epoch <= 1 {
			t.Errorf("partition %d: %+v", p, l)
		}
	}
}

// TestMetricsOfASecondManager: a Manager made again on the same registry
// (a tenant's daemon restarted, a start retried) reports its own
// partitions, not those of the first.
func TestMetricsOfASecondManager(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	reg := prometheus.NewRegistry()
	owned := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "forever_ownership_partitions_owned" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}
	first := startNode(t, s, Config{Node: "a", Partitions: 4, TTL: 60 * time.Second, Registerer: reg})
	first.stop(t)
	second := startNode(t, s, Config{Node: "a", Partitions: 4, TTL: 60 * time.Second, Registerer: reg})
	eventually(t, "the second manager owns 4", func() bool { return second.m.OwnedCount() == 4 })
	if got := owned(); got != 4 {
		t.Fatalf("forever_ownership_partitions_owned = %v, want the second manager's 4", got)
	}
}

// infoLog is a slog.Handler keeping the messages of INFO lines.
type infoLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *infoLog) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelInfo }
func (l *infoLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level != slog.LevelInfo {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}
func (l *infoLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *infoLog) WithGroup(string) slog.Handler      { return l }

func (l *infoLog) messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.msgs)
}
