package host

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/micro"

	"github.com/forever-agents/forever/agentd"
)

// ClusterSubject is the subject of the cluster's view on the NATS service:
// <prefix>.cluster. Its payload is empty, its reply an agentd.ClusterInfo,
// as GET /v1/cluster: the node that answers reports what it sees (any
// node answers). A tenant's credential reads its tenant's (its account's
// leases and streams).
func ClusterSubject(prefix string) string { return prefix + ".cluster" }

// handleCluster answers a cluster request in its own goroutine, within
// the node's bound of commands in flight.
func (h *Host) handleCluster(d *agentd.Daemon) micro.HandlerFunc {
	return func(req micro.Request) {
		select {
		case h.inflight <- struct{}{}:
		default:
			RespondError(req, fmt.Errorf("%w: %d commands in flight on node %s, retry later", ErrUnavailable, cap(h.inflight), h.own.Node()))
			return
		}
		h.handling.Add(1)
		go func() {
			defer func() {
				<-h.inflight
				h.handling.Done()
			}()
			if err := h.quotas.Allow(); err != nil {
				RespondError(req, err)
				return
			}
			h.mu.Lock()
			base := h.mu.ctx
			h.mu.Unlock()
			if base == nil {
				RespondError(req, fmt.Errorf("%w: starting up, try again", ErrUnavailable))
				return
			}
			ctx, cancel := context.WithTimeout(base, commandTimeout)
			defer cancel()
			info, err := d.ClusterInfo(ctx)
			if err != nil {
				RespondError(req, err)
				return
			}
			if err := req.RespondJSON(info); err != nil {
				h.logger.Warn("respond", "subject", req.Subject(), "err", err)
			}
		}()
	}
}
