package ownership

import (
	"time"
)

// Incarnations. A node's key names the node and says when its process
// started (nodeValue.Started): each process under a name is one
// incarnation of the node. The other nodes hand a partition to a node only
// once it was seen alive for a renewal period, so a node that flaps
// (starts and dies again and again) does not drag partitions back and
// forth. But a node that restarts under its name is no flapping stranger
// when its last incarnation was seen heartbeating (its key written again
// after it was first seen; heartbeats come a renewal period apart) or
// stopped in order (it deleted its key, its partitions handed off, as on
// SIGTERM): it is due its partitions at once (dueLocked), and a restart
// costs the restarted node's handover, not a renewal period on top
// (issue 36).
//
// The flap guard holds for what it guarded: a node that dies (a crash, a
// kill: its key expires or announces another start) before it
// heartbeats twice is never handed a partition, as before, since its next
// incarnation waits a renewal period again, as a stranger does. One whose
// incarnations live a renewal period was handed its partitions at every
// restart before too, a renewal period later. Fencing is untouched: every
// handover is a new lease with the next epoch.
//
// What a node remembers of another's incarnations it saw itself: when the
// current one was first seen (Manager.mu.nodes), the start its key
// announces (mu.starts), and how the last one that ended went (mu.lives:
// how long it was seen alive, from first seen to its last heartbeat, and
// whether it stopped in order), for restartMemory after it ended. An
// incarnation ends when its key goes (a stop deletes it, the server
// expires it) or when the key announces another start (a restart before
// the key expired).

// life is how an ended incarnation of a node went: how long it was seen
// alive, whether it stopped in order, and when it ended, on this
// process's monotonic clock.
type life struct {
	lived   time.Duration
	orderly bool
	ended   time.Time
}

// stableLife is how long an incarnation must have been seen alive (first
// seen to last heartbeat) for the next one under its name to be due its
// partitions at once: half a renewal period, so a second heartbeat, which
// comes a renewal period after the first, counts whatever its delay.
func (m *Manager) stableLife() time.Duration { return m.cfg.RenewEvery / 2 }

// restartMemory is how long after an incarnation ended its life is
// remembered: a restart later than that (a node gone for minutes) waits a
// renewal period, as a stranger does.
func (m *Manager) restartMemory() time.Duration { return 30 * m.cfg.TTL }

// endLocked records the end of node's current incarnation, seen alive from
// when it was first seen to its last heartbeat, orderly when it deleted
// its key; and forgets the lives that ended more than restartMemory ago.
// REQUIRES: m.mu held.
func (m *Manager) endLocked(node string, now time.Time, orderly bool) {
	if first, ok := m.mu.nodes[node]; ok {
		m.mu.lives[node] = life{lived: max(0, m.mu.beats[node].Sub(first)), orderly: orderly, ended: now}
	}
	delete(m.mu.starts, node)
	for n, l := range m.mu.lives {
		if now.Sub(l.ended) > m.restartMemory() {
			delete(m.mu.lives, n)
		}
	}
}

// dueLocked reports whether a partition may be handed to node now: it was
// seen alive for a renewal period, or its last incarnation, ended within
// restartMemory, was seen heartbeating or stopped in order.
// REQUIRES: m.mu held.
func (m *Manager) dueLocked(node string, now time.Time) bool {
	seen, ok := m.mu.nodes[node]
	if !ok {
		return false
	}
	if now.Sub(seen) >= m.cfg.RenewEvery {
		return true
	}
	l, ok := m.mu.lives[node]
	return ok && (l.orderly || l.lived >= m.stableLife()) && now.Sub(l.ended) <= m.restartMemory()
}
