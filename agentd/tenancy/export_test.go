package tenancy

import "github.com/forever-agents/forever/agentd"

// AttachWithTenantShards is Attach whose tenants' new logs take the
// shard count newShards returns instead of the node's: 0 makes them
// unsharded, as a release before tenants' shards created them.
func AttachWithTenantShards(d *agentd.Daemon, setup func(*agentd.Daemon) error, newShards func() int) error {
	return attach(d, setup, newShards)
}
