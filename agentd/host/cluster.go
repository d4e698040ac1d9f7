package host

import (
	"context"

	"github.com/nats-io/nats.go/micro"

	"github.com/forever-agents/forever/agentd"
)

// ClusterSubject is the subject of the cluster's view on the NATS service:
// <prefix>.cluster. Its payload is empty, its reply an agentd.ClusterInfo,
// as GET /v1/cluster: the node that answers reports what it sees (any
// node answers). A tenant's credential reads its tenant's (its account's
// leases and streams).
func ClusterSubject(prefix string) string { return prefix + ".cluster" }

// serveCluster answers a cluster request, admitted (admit) like a
// command.
func (h *Host) serveCluster(d *agentd.Daemon) endpoint {
	return func(ctx context.Context, req micro.Request) {
		info, err := d.ClusterInfo(ctx)
		if err != nil {
			RespondError(req, err)
			return
		}
		if err := req.RespondJSON(info); err != nil {
			h.logger.Warn("respond", "subject", req.Subject(), "err", err)
		}
	}
}
