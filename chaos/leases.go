package main

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/forever-agents/forever/ownership"
	"github.com/nats-io/nats.go/jetstream"
)

// The stall watch asks each stall agent's owner just before a kill, but a
// partition can move in the instant between: a node that came back is
// handed its partitions (a warm handoff), and chaos may kill it at once.
// Its agents then wait for the lease TTL as the victim's, while the ask
// named the node that handed them over. So the watch also follows the
// lease bucket, and a kill's measure counts as the victim's every agent
// whose partition's last lease write before the kill named the victim.

// leaseWrite is one write of a partition's lease: when the server stored
// it, and the holder it names ("" for a lease deleted or expired).
type leaseWrite struct {
	at   time.Time
	node string
}

// leaseLog holds each partition's lease writes, in the order they came.
type leaseLog struct {
	mu     sync.Mutex
	writes map[int][]leaseWrite
}

// followLeases watches the lease bucket of js's account until ctx ends.
// A connection that cannot watch it only loses this second source: the
// owners asked before each kill still count.
func followLeases(ctx context.Context, js jetstream.JetStream) (*leaseLog, error) {
	kv, err := js.KeyValue(ctx, ownership.DefaultBucket)
	if err != nil {
		return nil, err
	}
	watch, err := kv.Watch(ctx, "lease.*", jetstream.IncludeHistory())
	if err != nil {
		return nil, err
	}
	l := &leaseLog{writes: map[int][]leaseWrite{}}
	go func() {
		defer watch.Stop()
		for e := range watch.Updates() {
			if e == nil {
				continue // the history's end
			}
			deleted := e.Operation() != jetstream.KeyValuePut
			if lease, ok := ownership.ParseLeaseEntry(e.Key(), e.Value(), e.Revision(), deleted); ok {
				l.wrote(lease.Partition, lease.Node, e.Created())
			}
		}
	}()
	return l, nil
}

// wrote records a write of partition p's lease naming node at at.
func (l *leaseLog) wrote(p int, node string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes[p] = append(l.writes[p], leaseWrite{at: at, node: node})
}

// heldBy reports whether node held partition p at t: the last write of
// its lease at or before t names node.
func (l *leaseLog) heldBy(node string, p int, t time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	holder := ""
	for _, w := range l.writes[p] {
		if w.at.After(t) {
			break
		}
		holder = w.node
	}
	return holder != "" && holder == node
}

// withLeasesAt returns k with every stall agent whose partition the lease
// bucket names the victim's at the kill counted as the victim's, where
// the ask before the kill named another owner.
func (w *stallWatch) withLeasesAt(k stallKill) stallKill {
	if w.leases == nil || w.partitions <= 0 {
		return k
	}
	cloned := false
	for _, a := range w.agents {
		if k.held[a] || !w.leases.heldBy(k.victim, ownership.PartitionOf(a, w.partitions), k.killed) {
			continue
		}
		if !cloned {
			k.held, cloned = maps.Clone(k.held), true
		}
		k.held[a] = true
		k.owned++
		k.movedLeases++
	}
	return k
}
