package ownership

import (
	"slices"
	"time"
)

// Draining: a warm stop. A node that stops in order used to delete its key
// and hand every partition off at once: the nodes taking them had not
// followed their views, so each partition's agents waited for their new
// owner to catch them up (1.2 s at p50, 3.1 s at p99, measured by bench
// -run handoff; a start, whose handoffs go warm, cost 117 ms at p50). A
// stop now goes the way a start does, in reverse:
//
//   - The node announces it is leaving (nodeValue.Leaving) and keeps
//     renewing its leases. Every node assigns without it (liveLocked), so
//     each of its partitions is incoming to another node, which prepares
//     it (warm.go) and announces it warm.
//   - The leaving node hands each partition off once its receiver
//     announces it warm, as any holder does (plan, handoffReadyLocked),
//     and takes nothing meanwhile.
//   - When it holds nothing, or DrainWait passed, the stop goes on as
//     before: the node key is deleted and what is still held is handed
//     off cold.
//
// A node that is the last one not leaving (a whole cluster stopping, its
// last node) skips the drain: nobody would take its partitions. A node
// that dies while draining is taken over as any dead node: its key, still
// leaving, expires. An earlier release ignores the flag and counts the
// node live until its key goes, so it prepares none of its partitions;
// its key does not say it drains (nodeValue.Drains), so the leaving node
// hands it partitions at once, as before (TestDrainToAnEarlierRelease),
// and it acquires them at once as their last holder's partitions (plan). Fencing is
// untouched: each handoff is a new lease with the next epoch.

// startDrain makes this node leave the assignment and announces it, and
// reports whether a drain started: not when DrainWait is negative, this
// node holds nothing, or no other node is live and not leaving.
func (m *Manager) startDrain() bool {
	if m.cfg.DrainWait < 0 {
		return false
	}
	m.mu.Lock()
	others := slices.DeleteFunc(m.liveLocked(), func(n string) bool { return n == m.cfg.Node })
	held := len(m.mu.held)
	if held == 0 || len(others) == 0 {
		m.mu.Unlock()
		return false
	}
	m.mu.draining = true
	m.mu.Unlock()
	m.log.Info("stopping: handing partitions off as the nodes taking them catch them up",
		"held", held, "to", others, "wait", m.cfg.DrainWait)
	m.announce()
	m.pokeLoop()
	return true
}

// drained reports whether a drain is over: nothing is held but what is
// being handed off, or no node is left to take the rest.
func (m *Manager) drained() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.liveLocked()) == 0 || m.keptLocked() == 0
}

// endDrain logs how a drain went, started at start.
func (m *Manager) endDrain(start time.Time) {
	m.mu.Lock()
	left := m.keptLocked()
	m.mu.Unlock()
	m.log.Info("partitions handed off warm before stopping", "took", time.Since(start).Round(time.Millisecond),
		"left_cold", left)
}

// keptLocked counts the held partitions not being handed off.
// REQUIRES: m.mu held.
func (m *Manager) keptLocked() int {
	n := 0
	for _, h := range m.mu.held {
		if !h.releasing {
			n++
		}
	}
	return n
}

// Leaving reports whether node is stopping: its key announces it, or it is
// this node, draining or stopping.
func (m *Manager) Leaving(node string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if node == m.cfg.Node {
		return m.mu.draining || m.mu.stopping
	}
	return m.mu.leaving[node]
}

// Streams returns the names of the streams of the lease bucket and the
// partitions bucket (its epoch counters): what an acquisition writes.
func (m *Manager) Streams() []string {
	return []string{bucketStream(m.cfg.Bucket), bucketStream(m.cfg.PartitionsBucket)}
}
