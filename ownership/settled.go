package ownership

import "time"

// Settled reports whether the partitions are where the balanced
// assignment wants them, as this node sees them, and have stayed there
// for quiet: no partition is free or held by a node the assignment does
// not give it (a move due, a warm handoff waiting on its receiver), and
// this node's watch saw no lease move within quiet.
//
// Work that would disturb a partition's first writes on its new holder
// waits for it: agentd's leader spread does not step a shard stream's
// leader down while a returning node's partitions move back to it, so an
// agent's first write on its new holder does not also wait out its
// stream's election (chaos at stop 69: 1.23 s).
func (m *Manager) Settled(quiet time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := len(m.mu.moves); n > 0 && time.Since(m.mu.moves[n-1].Time) < quiet {
		return false
	}
	for p, want := range m.wantLocked(m.liveLocked()) {
		if m.holderLocked(p) != want {
			return false
		}
	}
	return true
}

// holderLocked returns the node holding partition p's lease as this node
// sees it: this node for one it holds and does not hand off, the watch's
// holder otherwise, "" for a free partition or one it is handing off.
// REQUIRES: m.mu held.
func (m *Manager) holderLocked(p int) string {
	if h := m.mu.held[p]; h != nil {
		if h.releasing {
			return ""
		}
		return m.cfg.Node
	}
	if c, ok := m.mu.leases[p]; ok && c.lease.Node != m.cfg.Node {
		return c.lease.Node
	}
	return ""
}
