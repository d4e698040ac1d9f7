package ownership

import (
	"context"
	"slices"
	"time"
)

// Warm handoffs. A partition handed to a node that has not followed it
// stalls its agents while the new owner's views catch it up (about a
// second for a node just restarted, longer for a long history). So a node
// gets ready for the partitions coming to it before it owns them:
//
//   - A partition is incoming to this node while the assignment gives it
//     to this node and another node holds its lease. For each, Run starts
//     Config.Prepare (agentd follows the partition's views and waits for
//     them to catch up) and keeps it running while the partition is
//     assigned to this node or held by it, so an acquisition changes
//     nothing Prepare started.
//   - Prepare calls warm once the partition can be served at once; the
//     node then announces it in its node key (nodeValue.Warm), written at
//     once rather than at the next heartbeat.
//   - The holder hands a partition off to a node that announces warm
//     partitions (nodeValue.Warms) only once that node lists it, or
//     WarmWait after the handoff was first due: a receiver whose views
//     cannot catch up does not keep a partition from it for long. A node
//     that announces nothing (an earlier release, or no Prepare) is handed
//     its partitions at once, as before; an earlier release's holder
//     ignores the fields and hands off at once too. So the fields need no
//     record format.
//
// An announcement is a write of the node key like a heartbeat, and the
// other nodes take it as one (incarnation.go): it is as much evidence
// that the node lives.
//
// What it does not cover: a node that stops (its partitions go at once,
// to nodes that learn of it then) and a node that dies (taken over by
// nodes that learn of it then). Fencing is untouched: a warm handoff is a
// handoff, the next lease has the next epoch.
//
// forever_ownership_handoffs_total counts handoffs by how the receiver
// was: warm, waited (WarmWait passed), or unannounced.

// warming is one running Prepare.
type warming struct {
	cancel context.CancelFunc
	warm   bool // Prepare called warm
}

// peerWarm is what a node's key announces of its warm partitions.
type peerWarm struct {
	announces bool
	parts     []int
	drains    bool // knows a leaving node (drain.go)
}

// warmWait is a handoff of a partition held back until its receiver
// announces the partition warm: to whom, and since when.
type warmWait struct {
	node  string
	since time.Time
}

// Outcomes of a handoff, as forever_ownership_handoffs_total labels them.
const (
	handoffWarm        = "warm"
	handoffWaited      = "waited"
	handoffUnannounced = "unannounced"
)

// syncWarm starts Prepare for every partition newly incoming to this node
// and stops it for every partition this node is neither assigned nor
// holds. Run's goroutine calls it after each round and check.
func (m *Manager) syncWarm() {
	if m.cfg.Prepare == nil {
		return
	}
	m.mu.Lock()
	if m.mu.stopping {
		m.mu.Unlock()
		return
	}
	want := m.wantLocked(m.liveLocked())
	me := m.cfg.Node
	cooled := false
	for p := range m.cfg.Partitions {
		w := m.mu.warming[p]
		_, held := m.mu.held[p]
		c, leased := m.mu.leases[p]
		switch {
		case w == nil && want[p] == me && !held && leased && c.lease.Node != me:
			ctx, cancel := context.WithCancel(context.Background())
			w = &warming{cancel: cancel}
			m.mu.warming[p] = w
			m.warmers.Go(func() { m.cfg.Prepare(ctx, p, func() { m.warmed(p, w) }) })
		case w != nil && want[p] != me && !held:
			w.cancel()
			delete(m.mu.warming, p)
			cooled = cooled || w.warm
		}
	}
	m.mu.Unlock()
	if cooled {
		m.announce()
	}
}

// warmed records that w, partition p's Prepare, found p ready, and
// announces it.
func (m *Manager) warmed(p int, w *warming) {
	m.mu.Lock()
	fresh := m.mu.warming[p] == w && !w.warm
	if fresh {
		w.warm = true
	}
	m.mu.Unlock()
	if fresh {
		m.log.Debug("partition warm before its handoff", "partition", p)
		m.announce()
	}
}

// announce has the renewer write this node's key now: a warm partition is
// news the holder waits for.
func (m *Manager) announce() {
	select {
	case m.announcing <- struct{}{}:
	default:
	}
}

// stopWarm stops every Prepare and waits for them.
func (m *Manager) stopWarm() {
	m.mu.Lock()
	for p, w := range m.mu.warming {
		w.cancel()
		delete(m.mu.warming, p)
	}
	m.mu.Unlock()
	m.warmers.Wait()
}

// warmPartsLocked returns the partitions this node announces warm, in
// order: those whose Prepare called warm and that it does not hold yet.
// REQUIRES: m.mu held.
func (m *Manager) warmPartsLocked() []int {
	var out []int
	for p, w := range m.mu.warming {
		if _, held := m.mu.held[p]; w.warm && !held {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// handoffReadyLocked reports whether partition p may be handed to node
// now, as far as node's views go, and how: node announces p warm, or
// announces nothing (or, while this node drains, does not know a leaving
// node: drain.go), or WarmWait passed since the handoff was first due.
// REQUIRES: m.mu held.
func (m *Manager) handoffReadyLocked(p int, node string, now time.Time) (string, bool) {
	pw := m.mu.peers[node]
	switch {
	case !pw.announces, m.mu.draining && !pw.drains:
		// A node that does not know a leaving node does not prepare
		// its partitions: waiting would only delay the stop.
		return handoffUnannounced, true
	case slices.Contains(pw.parts, p):
		return handoffWarm, true
	}
	w, ok := m.mu.waits[p]
	if !ok || w.node != node {
		m.mu.waits[p] = warmWait{node: node, since: now}
		return "", false
	}
	return handoffWaited, now.Sub(w.since) >= m.cfg.WarmWait
}

// handedTo counts handoff a, claimed, by how its receiver was, and says
// so when it goes to a node whose views did not catch it up in time.
func (m *Manager) handedTo(a action) {
	m.met.handoffs.WithLabelValues(a.how).Inc()
	if a.how == handoffWaited {
		m.log.Info("handing a partition off to a node whose views have not caught it up",
			"partition", a.p, "to", a.to, "waited", m.cfg.WarmWait)
	}
}

// warmNewsLocked reports whether node's announced warm partitions gain
// one this node holds: a handoff may go now, not at the next check.
// REQUIRES: m.mu held.
func (m *Manager) warmNewsLocked(node string, warm []int) bool {
	old := m.mu.peers[node].parts
	for _, p := range warm {
		if _, held := m.mu.held[p]; held && !slices.Contains(old, p) {
			return true
		}
	}
	return false
}
