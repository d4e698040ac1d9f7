package ownership

import (
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

func leaseEntry(p int, node string, epoch, rev uint64) entry {
	v, _ := json.Marshal(leaseValue{Node: node, Epoch: epoch})
	return entry{key: leaseKey(p), val: v, rev: rev, op: jetstream.KeyValuePut}
}

// TestMoves: the leases a watch finds at start are not moves, renewals
// and a restarted watch's repeats are not either; a handoff (delete, then
// another node's acquisition), a takeover and a release are, in order,
// with the new epoch.
func TestMoves(t *testing.T) {
	m := planner("b", 4)
	for _, n := range []string{"a", "b"} {
		m.apply(entry{key: prefixNode + n, val: []byte(`{}`), rev: 1, op: jetstream.KeyValuePut})
	}
	// The watch's first delivery: partitions 0-2 held, 3 free.
	m.apply(leaseEntry(0, "a", 1, 10))
	m.apply(leaseEntry(1, "a", 1, 11))
	m.apply(leaseEntry(2, "b", 1, 12))
	m.markFree()
	if got := m.Moves(); len(got) != 0 {
		t.Fatalf("moves at start: %+v", got)
	}
	m.apply(leaseEntry(0, "a", 1, 20)) // a renewal
	m.apply(leaseEntry(0, "a", 1, 20)) // delivered again by a restarted watch
	if got := m.Moves(); len(got) != 0 {
		t.Fatalf("moves after renewals: %+v", got)
	}
	m.apply(entry{key: leaseKey(0), rev: 21, op: jetstream.KeyValueDelete}) // a hands 0 off
	m.apply(leaseEntry(0, "b", 2, 22))                                      // b acquires it
	m.apply(leaseEntry(1, "b", 2, 23))                                      // b takes 1 over
	m.apply(leaseEntry(3, "a", 1, 24))                                      // a acquires free 3
	want := []Move{
		{Partition: 0, From: "a", Epoch: 1},
		{Partition: 0, From: "a", To: "b", Epoch: 2},
		{Partition: 1, From: "a", To: "b", Epoch: 2},
		{Partition: 3, To: "a", Epoch: 1},
	}
	got := m.Moves()
	if len(got) != len(want) {
		t.Fatalf("moves = %+v, want %+v", got, want)
	}
	for i := range want {
		g := got[i]
		g.Time = want[i].Time
		if g != want[i] || got[i].Time.IsZero() {
			t.Errorf("move %d = %+v, want %+v with a time", i, got[i], want[i])
		}
	}
	if l := m.Leases(); len(l) != 4 || l[0].Node != "b" || l[3].Node != "a" {
		t.Errorf("leases = %+v", l)
	}
	nodes := m.NodeInfos()
	if len(nodes) != 2 || nodes[0].Name != "a" || nodes[0].Owns != 1 || nodes[1].Owns != 3 {
		t.Errorf("nodes = %+v", nodes)
	}
}

// TestMovesBounded: a Manager keeps the last maxMoves moves.
func TestMovesBounded(t *testing.T) {
	m := planner("b", 1)
	m.markFree()
	for i := range maxMoves + 10 {
		node := "a"
		if i%2 == 1 {
			node = "b"
		}
		m.apply(leaseEntry(0, node, uint64(i+1), uint64(i+1)))
	}
	got := m.Moves()
	if len(got) != maxMoves || got[len(got)-1].Epoch != maxMoves+10 {
		t.Fatalf("%d moves, last %+v; want %d ending at epoch %d", len(got), got[len(got)-1], maxMoves, maxMoves+10)
	}
}
