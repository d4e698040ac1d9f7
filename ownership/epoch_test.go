package ownership

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/nats-io/nats.go/jetstream"
)

// epochs returns the epoch of each partition n holds.
func epochs(n *node, partitions int) []uint64 {
	out := make([]uint64, partitions)
	for p := range partitions {
		if l, _, ok := n.m.Owned(p); ok {
			out[p] = l.Epoch
		}
	}
	return out
}

// TestEpochsCount: a partition's epoch is a count of its acquisitions: 1
// for the first lease of a new cluster, one more for a restarted node
// taking its lease back, one more for each handoff, and never smaller.
func TestEpochsCount(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	cfg := Config{Node: "a", Partitions: 4, TTL: 4 * time.Second}
	old := startNode(t, s, cfg)
	if got := epochs(old, 4); got[0] != 1 || got[1] != 1 || got[2] != 1 || got[3] != 1 {
		t.Fatalf("first epochs %v, want 1 each", got)
	}
	old.nc.Close() // a crash: nothing handed off
	a := startNode(t, s, cfg)
	eventually(t, "a takes its 4 leases back", func() bool { return a.m.OwnedCount() == 4 })
	if got := epochs(a, 4); got[0] != 2 || got[3] != 2 {
		t.Fatalf("epochs after a restart %v, want 2 each", got)
	}
	b := startNode(t, s, Config{Node: "b", Partitions: 4, TTL: 4 * time.Second})
	eventually(t, "b takes its share", func() bool { return b.m.OwnedCount() == 2 && a.m.OwnedCount() == 2 })
	for p, e := range epochs(b, 4) {
		if e != 0 && e != 3 {
			t.Errorf("partition %d handed to b at epoch %d, want 3", p, e)
		}
	}
	b.stop(t)
	eventually(t, "a takes all back", func() bool { return a.m.OwnedCount() == 4 })
	got := epochs(a, 4)
	n4 := 0
	for _, e := range got {
		if e != 2 && e != 4 {
			t.Errorf("epochs %v: want 2 (kept) or 4 (back from b)", got)
		}
		if e == 4 {
			n4++
		}
	}
	if n4 != 2 {
		t.Errorf("epochs %v: want the 2 partitions back from b at 4", got)
	}
}

// TestEpochCountedMeanwhile: another acquisition counts the partition's
// epoch between this one's read of the counter and its lease write (a
// node that acquired and lost it meanwhile): this lease is deleted
// unserved, and the next acquisition serves with an epoch above the other.
func TestEpochCountedMeanwhile(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	nc := eventlogtest.Connect(t, s)
	m, err := New(context.Background(), Config{Conn: nc, Node: "a", Partitions: 1, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var served []Lease
	m.cfg.Serve = func(ctx context.Context, l Lease) {
		mu.Lock()
		served = append(served, l)
		mu.Unlock()
		<-ctx.Done()
	}
	var once sync.Once
	m.afterEpochRead = func(p int) {
		once.Do(func() {
			if _, err := m.parts.Put(context.Background(), epochKey(p), []byte("7")); err != nil {
				t.Error(err)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(t, "a serves the partition", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(served) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if len(served) != 1 || served[0].Epoch != 8 {
		t.Fatalf("served %+v, want one lease at epoch 8 (the counter was 7)", served)
	}
	e, err := m.parts.Get(context.Background(), epochKey(0))
	if err != nil || string(e.Value()) != "8" {
		t.Fatalf("counter %v %v, want 8", e, err)
	}
}

// TestEpochsAfterUpgrade: in a cluster whose leases were counted by
// revision before (config.partitions stored, no epoch base), the counters
// start above every revision, so epochs never go back across the upgrade:
// a lease written before without an epoch is taken over with a larger one.
func TestEpochsAfterUpgrade(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	nc := eventlogtest.Connect(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: DefaultBucket, History: 1, LimitMarkerTTL: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, keyPartitions, []byte("2")); err != nil {
		t.Fatal(err)
	}
	for i := range 40 { // the revisions an older cluster's writes left
		if _, err := kv.Put(ctx, "node.x", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	old, err := kv.Put(ctx, leaseKey(0), []byte(`{"node":"a"}`)) // epoch = its revision
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "node.x"); err != nil {
		t.Fatal(err)
	}
	a := startNode(t, s, Config{Node: "a", Partitions: 2, TTL: 60 * time.Second})
	eventually(t, "a takes both partitions", func() bool { return a.m.OwnedCount() == 2 })
	for p, e := range epochs(a, 2) {
		if e <= old {
			t.Errorf("partition %d at epoch %d, not above the older cluster's %d", p, e, old)
		}
	}
}

// TestEpochsSmallWhenNodesStartTogether: nodes of a new cluster start at
// once, so the one that stores the epoch base may not be the one that
// created the buckets; the lease bucket then holds nothing yet, and the
// first epochs are still 1 (not the bucket's time-based first revision).
func TestEpochsSmallWhenNodesStartTogether(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	cfg := Config{Node: "a", Partitions: 4, TTL: 4 * time.Second}
	// Another node created both buckets and has not stored the base yet.
	other := cfg
	other.Node, other.Conn = "b", eventlogtest.Connect(t, s)
	if err := other.setDefaults(); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(other.Conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := openBucket(t.Context(), js, other, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := openPartitionsBucket(t.Context(), js, other); err != nil {
		t.Fatal(err)
	}
	a := startNode(t, s, cfg)
	if got := epochs(a, 4); got[0] != 1 || got[3] != 1 {
		t.Fatalf("first epochs %v, want 1 each", got)
	}
}

// TestGarbledEpochRepaired: a counter that does not parse (issue 32: a
// reply published on its key) is repaired by the next acquisition, with
// an epoch above any it may have counted, not left a partition nobody
// serves.
func TestGarbledEpochRepaired(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	nc := eventlogtest.Connect(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := OpenPartitionsBucket(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parts.Put(t.Context(), epochKey(0), []byte(`{"type":"io.nats.micro.v1.info_response"}`)); err != nil {
		t.Fatal(err)
	}
	before := uint64(time.Now().UnixMicro())
	m, err := New(context.Background(), Config{Conn: nc, Node: "a", Partitions: 1, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var served []Lease
	m.cfg.Serve = func(ctx context.Context, l Lease) {
		mu.Lock()
		served = append(served, l)
		mu.Unlock()
		<-ctx.Done()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(t, "a serves the partition", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(served) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if got := served[0].Epoch; got <= before {
		t.Fatalf("served at epoch %d, want above %d (the floor of a garbled counter)", got, before)
	}
	e, err := m.parts.Get(context.Background(), epochKey(0))
	if err != nil || string(e.Value()) != strconv.FormatUint(served[0].Epoch, 10) {
		t.Fatalf("counter %q %v, want %d", e.Value(), err, served[0].Epoch)
	}
}

// TestGarbledLeaseRepaired: a lease key that holds no lease (issue 32: a
// reply published on it) makes its holder stop serving at its next
// renewal; a TTL after the write the key is deleted and the partition
// acquired again, at a higher epoch, not left to nobody.
func TestGarbledLeaseRepaired(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	nc := eventlogtest.Connect(t, s)
	m, err := New(context.Background(), Config{Conn: nc, Node: "a", Partitions: 1, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var served []Lease
	m.cfg.Serve = func(ctx context.Context, l Lease) {
		mu.Lock()
		served = append(served, l)
		mu.Unlock()
		<-ctx.Done()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(served)
	}
	eventually(t, "a serves the partition", func() bool { return count() == 1 })
	if _, err := m.kv.Put(context.Background(), leaseKey(0), []byte(`{"type":"io.nats.micro.v1.info_response"}`)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a serves the partition again", func() bool { return count() == 2 })
	mu.Lock()
	defer mu.Unlock()
	if served[1].Epoch <= served[0].Epoch {
		t.Fatalf("served %+v: the lease after the repair has no higher epoch", served)
	}
	if l, ok, err := m.Lookup(context.Background(), 0); err != nil || !ok || l != served[1] {
		t.Fatalf("the lease key holds %+v %v %v, want %+v", l, ok, err, served[1])
	}
}
