package agentd

import (
	"context"
	"time"
)

// leadAwayTimeout bounds the stepdowns a stop asks for before its handoff.
const leadAwayTimeout = 2 * time.Second

// leadAway asks the Raft leaders this node's embedded server holds, of the
// event log's streams and the ownership buckets' (leases, epoch
// counters), to step down for the other
// servers (eventlog.Log.LeadAway), at the start of a stop. nats-server's
// lame duck mode would move them only after the partitions were handed
// off, and the new owners' first reads and writes would wait for those
// elections. Without an embedded server, or replicas, it does nothing;
// a stepdown that fails is logged, and the lame duck mode moves that
// leader as before.
func (d *Daemon) leadAway(r *resources) {
	if r.srv == nil || r.lg == nil || !d.cfg.clustered() || d.cfg.Replicas < 2 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), leadAwayTimeout)
	defer cancel()
	var extra []string
	if d.parts.mgr != nil {
		extra = d.parts.mgr.Streams()
	}
	start := time.Now()
	moved, err := r.lg.LeadAway(ctx, r.srv.Name(), extra, d.notLeaving(routedTo(r.srv)))
	if err != nil {
		d.logger.Warn("moving this server's stream leaders before the handoff; lame duck mode moves the rest", "err", err)
	}
	if len(moved) > 0 {
		d.logger.Info("stream leaders moved to the other servers before the handoff", "streams", len(moved),
			"took", time.Since(start))
	}
}

// notLeaving narrows reachable (nil: every server) to the servers whose
// node is not stopping: a leader given to a node that stops would move
// again at its lame duck mode.
func (d *Daemon) notLeaving(reachable func(string) bool) func(string) bool {
	mgr := d.parts.mgr
	if mgr == nil {
		return reachable
	}
	return func(name string) bool {
		return !mgr.Leaving(name) && (reachable == nil || reachable(name))
	}
}
