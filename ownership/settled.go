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
	holders := m.holdersLocked()
	for p, want := range m.wantLocked(m.liveLocked()) {
		if holders[p] != want {
			return false
		}
		// A lease of this node's name counts as its own in holders, but
		// one from its last process is not served until this process
		// takes it.
		if want == m.cfg.Node && m.mu.held[p] == nil {
			return false
		}
	}
	return true
}
