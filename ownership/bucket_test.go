package ownership

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestLeasesOutliveAFullStore: data filling the JetStream file store to its
// limit does not stop lease renewals or heartbeats: the bucket is in the
// memory store. With the bucket on file storage (the old layout), the same
// fill makes the node lose every partition.
func TestLeasesOutliveAFullStore(t *testing.T) {
	for _, tc := range []struct {
		name string
		file bool
	}{{"memory", false}, {"file", true}} {
		t.Run(tc.name, func(t *testing.T) {
			// The two layouts run side by side, each on a server of its
			// own: each mostly waits out its three TTLs (6 s).
			t.Parallel()
			s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{MaxStore: 8 << 20})
			sv := newServing(t)
			const ttl = 2 * time.Second
			a := startNode(t, s, Config{Node: "a", Partitions: 8, TTL: ttl, FileStorage: tc.file, Serve: sv.serve("a")})
			js, _ := jetstream.New(a.nc)
			info, err := js.Stream(t.Context(), bucketStream(DefaultBucket))
			if err != nil {
				t.Fatal(err)
			}
			want := jetstream.MemoryStorage
			if tc.file {
				want = jetstream.FileStorage
			}
			if got := info.CachedInfo().Config.Storage; got != want {
				t.Fatalf("bucket storage %v, want %v", got, want)
			}
			// Epochs count acquisitions, kept on file storage apart from
			// the leases.
			if l, _, ok := a.m.Owned(0); !ok || l.Epoch != 1 {
				t.Errorf("lease of partition 0: %+v, want epoch 1 (the partition's first acquisition)", l)
			}
			if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "BALLAST", Subjects: []string{"ballast"}}); err != nil {
				t.Fatal(err)
			}
			big := make([]byte, 256<<10)
			for i := 0; ; i++ {
				if _, err := js.Publish(t.Context(), "ballast", big); err != nil {
					break
				}
				if i > 100 {
					t.Fatal("the store never filled")
				}
			}
			time.Sleep(3 * ttl) // not a synchronisation: three lease TTLs pass on a full store
			got := a.m.OwnedCount()
			if tc.file {
				if got != 0 {
					t.Errorf("on file storage under a full store the node still owns %d partitions; the memory store is then not what keeps them", got)
				}
				return
			}
			if got != 8 {
				t.Errorf("owns %d partitions after %s of a full store, want 8", got, 3*ttl)
			}
		})
	}
}

// TestRestoreBucket: the lease bucket deleted under two running nodes and
// restored by each (as agentd's guard does): both stop serving at once,
// nobody serves a partition twice, the partitions are split again after a
// TTL, and every partition's new epoch is above its old one (the log's
// writer headers rely on epochs never going back): the counters are not in
// the lease bucket.
func TestRestoreBucket(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	sv := newServing(t)
	const ttl = 2 * time.Second
	cfg := func(name string) Config {
		return Config{Node: name, Partitions: 8, TTL: ttl, Serve: sv.serve(name)}
	}
	a := startNode(t, s, cfg("a"))
	b := startNode(t, s, cfg("b"))
	eventually(t, "a and b split 8 partitions", func() bool { return sv.count("a") == 4 && sv.count("b") == 4 })
	before := map[int]uint64{}
	for p := range 8 {
		for _, n := range []*node{a, b} {
			if l, _, ok := n.m.Owned(p); ok {
				before[p] = l.Epoch
			}
		}
	}
	sv.mu.Lock()
	clear(sv.causes)
	sv.mu.Unlock()
	js, _ := jetstream.New(a.nc)
	if err := js.DeleteKeyValue(t.Context(), DefaultBucket); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*node{a, b} {
		if err := n.m.RestoreBucket(t.Context()); err != nil {
			t.Fatalf("%s: %v", n.m.Node(), err)
		}
		if got := n.m.OwnedCount(); got != 0 {
			t.Errorf("%s owns %d partitions right after the bucket was lost, want 0", n.m.Node(), got)
		}
	}
	eventually(t, "a and b split 8 partitions again", func() bool { return sv.count("a") == 4 && sv.count("b") == 4 })
	for p := range 8 {
		for _, n := range []*node{a, b} {
			if l, _, ok := n.m.Owned(p); ok && l.Epoch <= before[p] {
				t.Errorf("partition %d: epoch %d after the bucket was restored, not above %d before", p, l.Epoch, before[p])
			}
		}
	}
	sv.mu.Lock()
	defer sv.mu.Unlock()
	// b's renewals, retried while the bucket is gone, can meet the bucket
	// a restored before b's own RestoreBucket: their compare-and-set
	// fails, a lease lost.
	for _, c := range append(sv.causes["a"], sv.causes["b"]...) {
		if !errors.Is(c, ErrBucketLost) && !errors.Is(c, ErrLeaseLost) {
			t.Errorf("a partition stopped with cause %v, want ErrBucketLost or ErrLeaseLost", c)
		}
	}
}

// TestFirstWatchWaits: a node whose first watch of the lease bucket fails
// (here the bucket is gone; in TestCluster/Join a joining node's JetStream
// had not caught up with the meta leader and the watch timed out) keeps
// trying, holds nothing meanwhile, and takes its leases once the bucket
// can be watched. Run used to return the error, and agentd exited.
func TestFirstWatchWaits(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	sv := newServing(t)
	cfg := Config{Node: "a", Partitions: 8, TTL: 2 * time.Second, RenewEvery: 200 * time.Millisecond, Serve: sv.serve("a")}
	nc := eventlogtest.Connect(t, s)
	cfg.Conn = nc
	m, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if err := js.DeleteKeyValue(t.Context(), DefaultBucket); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while the bucket could not be watched; want it to keep trying", err)
	case <-m.Ready():
		t.Fatal("ready without a lease bucket")
	case <-time.After(time.Second):
	}
	if got := m.OwnedCount(); got != 0 {
		t.Fatalf("owns %d partitions without a bucket", got)
	}
	// Another node's start makes the bucket again.
	if _, err := New(t.Context(), Config{Conn: eventlogtest.Connect(t, s), Node: "b", Partitions: 8, TTL: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a takes its 8 partitions", func() bool { return sv.count("a") == 8 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
