// Package tenancy serves tenants from an agentd daemon with Config.Auth:
// one daemon per tenant, each in the tenant's own NATS account with its own
// streams, KV buckets, partition leases and Pebble views under
// <data>/tenants/<name>; the tenant registry (KV FOREVER_TENANTS, the
// truth, pushed to the server's account resolver at every start); the admin
// service that creates and revokes tenants' credentials
// (forever.admin.tenant.create|revoke, reached only with the admin
// credential); and the HTTP front door, which routes every request by its
// bearer token (an API token minted by tenant create, or an OIDC JWT) to
// its tenant's daemon.
//
// # Invariants
//
//   - Tenants are kept apart by the NATS server, not by Forever: each is an
//     account, so a tenant's credential reaches its own agents and chunk
//     stream only, and two tenants may use the same agent id.
//   - A credential works when tenant create returns: the record is written
//     by compare-and-set, the account pushed, and the tenant's daemon is
//     ready before the reply.
//   - Revocation cuts live access at once: the server closes the revoked
//     users' connections, and a request streaming with a revoked token is
//     ended.
//   - Without a valid bearer token an HTTP request gets 401 (403 for an
//     OIDC token naming a tenant nobody created) before any handler runs.
//
// # Usage
//
//	d, _ := agentd.New(cfg) // cfg.Auth
//	tenancy.Attach(d, func(td *agentd.Daemon) error {
//		return wireAgents(td) // as a daemon without auth is wired
//	})
//	d.Run(ctx)
package tenancy
