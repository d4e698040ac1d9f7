package tenancy

import (
	"time"

	"github.com/forever-agents/forever/agentd"
)

// AttachWithTenantShards is Attach whose tenants' new logs take the
// shard count newShards returns instead of the node's (0 makes them
// unsharded, as a release before tenants' shards created them), and
// whose moves wait up to moveStop (0: moveStopTimeout) for the tenant's
// nodes to stop.
func AttachWithTenantShards(d *agentd.Daemon, setup func(*agentd.Daemon) error, newShards func() int, moveStop time.Duration) error {
	if moveStop == 0 {
		moveStop = moveStopTimeout
	}
	return attach(d, setup, newShards, moveStop)
}
