package ownership

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// keeper returns planner's Manager of node me at record format active,
// keeping holders from format 2, with nodes live (seen for a renewal
// period, so partitions may be handed to them) and every partition leased
// at epoch 1 as holders says; me's are held by this process.
func keeper(t *testing.T, me string, active int, nodes, holders []string) *Manager {
	t.Helper()
	m := planner(me, len(holders))
	m.cfg.Format, m.cfg.KeepFormat = 2, 2
	m.mu.active = active
	m.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, n := range nodes {
		m.apply(entry{key: prefixNode + n, val: []byte(`{}`), rev: 1, op: jetstream.KeyValuePut})
		m.mu.nodes[n] = time.Now().Add(-time.Minute)
	}
	for p, node := range holders {
		l := Lease{Partition: p, Node: node, Epoch: 1}
		v, _ := json.Marshal(leaseValue{Node: node, Epoch: 1})
		m.apply(entry{key: leaseKey(p), val: v, rev: uint64(p + 1), op: jetstream.KeyValuePut})
		if node == me {
			ctx, cancel := context.WithCancelCause(context.Background())
			done := make(chan struct{})
			close(done)
			m.mu.held[p] = &held{lease: l, rev: uint64(p + 1), ctx: ctx, cancel: cancel, done: done}
		}
	}
	return m
}

// handoffs returns the partitions plan would hand off.
func handoffs(m *Manager) []int {
	var out []int
	for _, a := range m.plan() {
		if a.kind == handoff {
			out = append(out, a.p)
		}
	}
	return out
}

// TestPlanKeepsPartitionsWhenANodeLeaves: once the active format reached
// KeepFormat, a node that stays hands none of its partitions to another
// node that stays when a third leaves; before it, it hands off those
// assign moves between them. A lease this process lost does not count
// toward its bound while the watch still shows it, and a lease of this
// node's name it never held (its last process's) is taken over.
func TestPlanKeepsPartitionsWhenANodeLeaves(t *testing.T) {
	// A node count and partition count where assign moves one of b's
	// partitions to another node that stays when c leaves.
	var three, rest []string
	parts := 0
	for k := 3; k <= 6 && parts == 0; k++ {
		three = []string{"a", "b", "c", "d", "e", "f"}[:k]
		rest = slices.DeleteFunc(slices.Clone(three), func(n string) bool { return n == "c" })
		for n := 6; n <= 200 && parts == 0; n++ {
			before, after := assign(n, three), assign(n, rest)
			for p := range n {
				if before[p] == "b" && after[p] != "b" && after[p] != "" {
					parts = n
					break
				}
			}
		}
	}
	if parts == 0 {
		t.Fatal("no node count up to 6 and partition count up to 200 where assign moves a partition of b between nodes that stay")
	}
	t.Logf("%d nodes, %d partitions", len(three), parts)
	holders := assign(parts, three)
	for _, tc := range []struct {
		active int
		moves  bool
	}{{1, true}, {2, false}} {
		m := keeper(t, "b", tc.active, three, holders)
		if got := handoffs(m); len(got) != 0 {
			t.Fatalf("format %d: with the assignment held, plan hands off %v", tc.active, got)
		}
		m.apply(entry{key: prefixNode + "c", rev: 2, op: jetstream.KeyValueDelete})
		if got := handoffs(m); (len(got) > 0) != tc.moves {
			t.Errorf("format %d (keeping from 2), c left: b hands off %v", tc.active, got)
		}
	}

	// b holds one partition past its bound, z: its last in partition
	// order, taken from a (say by a node that came back). Then b loses
	// the lease of q, its first, and the watch still shows it: b does
	// not count q toward its bound, so z, now within it, stays.
	var mine []int
	for p, node := range holders {
		if node == "b" {
			mine = append(mine, p)
		}
	}
	z := -1
	for p := parts - 1; p > mine[len(mine)-1]; p-- {
		if holders[p] != "b" {
			z = p
			break
		}
	}
	if z < 0 {
		t.Skip("b holds the last partition")
	}
	more := slices.Clone(holders)
	more[z] = "b"
	m := keeper(t, "b", 2, three, more)
	if got := handoffs(m); !slices.Equal(got, []int{z}) {
		t.Fatalf("b, one partition past its bound, hands off %v, want [%d]", got, z)
	}
	q := mine[0]
	m.mu.Lock()
	m.loseLocked(q, m.mu.held[q], ErrHandoff)
	m.mu.Unlock()
	if got := handoffs(m); len(got) != 0 {
		t.Errorf("after losing partition %d, b hands off %v: it counts a lease it lost", q, got)
	}
	// r is a lease of b's name that this process never held: b's last
	// process held it before a restart. b takes it over.
	r := mine[1]
	delete(m.mu.held, r)
	took := false
	for _, a := range m.plan() {
		took = took || (a.p == r && a.kind == takeover)
	}
	if !took {
		t.Errorf("plan does not take over partition %d, leased by b's last process", r)
	}
	// q's key expires, then another node's lease of it arrives: b
	// forgets it lost q.
	m.apply(entry{key: leaseKey(q), rev: 500, op: jetstream.KeyValueDelete})
	if _, ok := m.mu.gaveUp[q]; ok {
		t.Errorf("partition %d still given up after its lease key was deleted", q)
	}
}
