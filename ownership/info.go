package ownership

import (
	"slices"
	"time"
)

// maxMoves bounds the lease moves a Manager remembers (Moves).
const maxMoves = 256

// Move is one change of a partition's holder as this node's watch saw it:
// a lease acquired by To after From held it (From empty: the partition was
// free since this node started watching), or released (To empty: the key
// was deleted by a handoff, or expired).
type Move struct {
	Time      time.Time `json:"time"`
	Partition int       `json:"partition"`
	From      string    `json:"from,omitempty"`
	To        string    `json:"to,omitempty"`
	// Epoch is the new lease's epoch, or the released one's.
	Epoch uint64 `json:"epoch"`
}

// NodeInfo is a node of the lease bucket as this node sees it.
type NodeInfo struct {
	Name string `json:"name"`
	// Live is false for a node whose key is still stored but whose
	// heartbeat this node has not seen for a TTL (it is taken for dead).
	Live bool `json:"live"`
	// Since is when this node first saw its key; LastBeat when it last
	// saw it written.
	Since    time.Time `json:"since"`
	LastBeat time.Time `json:"lastBeat,omitzero"`
	// Owns counts the partitions it holds the lease of.
	Owns int `json:"owns"`
}

// Leases returns every partition's lease as this node's watch last saw it,
// by partition; a free partition is missing. The caller owns the slice.
func (m *Manager) Leases() []Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Lease, 0, len(m.mu.leases))
	for _, c := range m.mu.leases {
		out = append(out, c.lease)
	}
	slices.SortFunc(out, func(a, b Lease) int { return a.Partition - b.Partition })
	return out
}

// Moves returns the last lease moves this node saw (at most 256), oldest
// first. A node starting sees the leases as they are, not as moves; a
// renewal is no move. The caller owns the slice.
func (m *Manager) Moves() []Move {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.mu.moves)
}

// NodeInfos returns the nodes whose keys this node's watch holds, and this
// node, sorted by name, with the partitions each holds.
func (m *Manager) NodeInfos() []NodeInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	owns := map[string]int{}
	for _, c := range m.mu.leases {
		owns[c.lease.Node]++
	}
	out := make([]NodeInfo, 0, len(m.mu.nodes)+1)
	for n, since := range m.mu.nodes {
		live := n == m.cfg.Node || !m.staleLocked(m.mu.beats[n], now)
		out = append(out, NodeInfo{Name: n, Live: live, Since: since, LastBeat: m.mu.beats[n], Owns: owns[n]})
	}
	if _, ok := m.mu.nodes[m.cfg.Node]; !ok && !m.mu.stopping {
		out = append(out, NodeInfo{Name: m.cfg.Node, Live: true, Since: m.mu.started, Owns: owns[m.cfg.Node]})
	}
	// A holder whose node key is gone (dead, or leaving) still shows.
	for n, k := range owns {
		if _, ok := m.mu.nodes[n]; !ok && n != m.cfg.Node {
			out = append(out, NodeInfo{Name: n, Owns: k})
		}
	}
	slices.SortFunc(out, func(a, b NodeInfo) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// recordMoveLocked remembers a move, dropping the oldest past maxMoves.
// REQUIRES: m.mu held.
func (m *Manager) recordMoveLocked(mv Move) {
	if len(m.mu.moves) >= maxMoves {
		m.mu.moves = slices.Delete(m.mu.moves, 0, len(m.mu.moves)-maxMoves+1)
	}
	m.mu.moves = append(m.mu.moves, mv)
}
