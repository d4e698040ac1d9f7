// Package tenancy serves tenants from an agentd daemon with Config.Auth:
// one daemon per tenant, each in the tenant's own NATS account with its own
// streams, KV buckets, partition leases and Pebble views under
// <data>/tenants/<name>; the tenant registry (KV FOREVER_TENANTS, the
// truth, pushed to the server's account resolver at every start); the admin
// service that creates tenants and their credentials, revokes them, and
// disables and enables tenants (forever.admin.tenant.create|revoke|
// disable|enable|token.revoke, reached only with the admin credential,
// and the node's cluster view on forever.cluster, which in the service
// account no host serves: agentd cluster with the admin credential);
// and the HTTP front door, which routes every request by its bearer token
// (an API token minted by tenant create, or an OIDC JWT) to its tenant's
// daemon.
//
// # Limits
//
// Every tenant is bounded: its record's quota (auth.Quota) with zero
// fields taking the node's defaults (agentd.Config.TenantDefaults, the
// --tenant-default-* flags; auth.Unlimited lifts one). The NATS server
// enforces what it can, from the tenant's account JWT: connections,
// JetStream file and memory storage, streams and consumers (agentd's own
// included); each client credential carries its subscriptions and
// payload limits. agentd enforces the rest (package agentd/quota). A
// tenant's client reaches JetStream only through agentd: its API requests
// go to auth.ClientAPIPrefix, where the tenant's daemons (a queue group)
// forward them to $JS.API in the tenant's account after taking one from
// the tenant's rate (but a direct get and a pull consumer's next batch,
// which the stream or consumer answers, not the server's shared API
// queue). A flood of API calls is refused at the tenant's rate with a
// JetStream API error 429 instead of filling the queue every account
// shares. The client's permissions name the API calls' stream with a
// wildcard; the forwarder refuses (403) a call on any stream but the
// log's chunks streams, FOREVER_CHUNKS or a shard's FOREVER_CHUNKS_<k>
// (checkStream, TestCheckStream).
//
// # Shards
//
// A new tenant's log takes its node's layout (agentd.TenantLink.Shards:
// the shard count the node's cluster stored; unsharded on a single
// server) and its views are owned as the node's are; a tenant whose log
// exists keeps its stored layout. The account's streams limit is the
// streams quota plus quota.ShardStreams (the shards past the first of
// each kind), so the quota counts a log as two streams, as the tenant's
// usage does (TestCluster/Auth in agentd/cmd/agentd checks a tenant of a
// 3-node cluster: 8 shards, replayed by its client, its usage).
//
// A tenant whose log an earlier release created unsharded moves into its
// node's shards with the admin's move (forever.admin.tenant.move, agentd
// tenant move; move.go): its record is marked Moving, every node stops
// its daemon, agentd.MoveToShards copies its log in its account once no
// node's heartbeat is left there, and the mark is cleared.
//
// A tenant's record also holds its budgets (auth.Budget: tenant create's
// --token-budget, --cost-budget, --user-token-budget, --user-cost-budget),
// which its daemon's chat agents read from the latest record before every
// model call (agentd.TenantLink.Budget), so a create that changes them
// binds at once; the spend is summed from the tenant's own log (package
// chat, budget_shared.go).
//
// # Credentials
//
// A credential is a NATS user (a creds file) and an HTTP token minted
// together, with a name unique in the tenant, a role (auth.Role: reader,
// approver, writer, admin) and an optional expiry. Its role is enforced by
// the server over NATS (the user's publish permissions name the command
// verbs it may send) and by agentd over HTTP (the front door puts the
// identity in the request's context; host.Command checks the verb, the
// chat type lets an approver answer approvals only, /debug/ needs admin).
// Its expiry is in the user JWT (the server closes its connections then)
// and checked on every HTTP request.
//
// The operator's admin has an HTTP token too (agentd auth admin-token,
// auth.Keys.AdminToken): signed by the operator's keys, expiring, stored
// nowhere. With it a request names its tenant in the X-Forever-Tenant
// header (400 without) and reaches that tenant's daemon as its admin; GET
// /v1/tenants, for it alone, lists the tenants with their quotas and what
// each uses now (read from its account). The console uses it to show
// every tenant's agents, and the tenants' quotas and use.
//
// # Revocation
//
// A tenant is live or disabled; each credential is live, expired or
// revoked. tenant revoke revokes every credential and refuses every OIDC
// token issued until then ("iat" at or before the revocation); token
// revoke revokes one credential; disable refuses the tenant everywhere
// (its account takes no connection, its daemon stops, every token and
// OIDC token gets 403) until enable. Each change ends the requests it
// concerns that are open: an SSE stream's context is cancelled, a
// WebSocket's connection closed; revoked users' NATS connections are
// closed by the server.
//
// # Audit
//
// Every admin operation, every command that may change an agent (through
// agentd.Config.AuditCommand, which each tenant's daemon gets: with the
// HTTP credential's identity; for a NATS command "admin" when it carries
// the actor token the admin service granted with tenant access
// (agentd.Config.CommandActor), else "nats") and every auth refusal (the
// front door's, and the NATS server's denials through
// agentd.Daemon.OnNATSDenial, mapped to tenant and credential) is
// appended to the audit log (package agentd/audit), in agentd's own
// account. The admin's own command reports what it did outside agentd
// (AdminAuditSubject): minting admin credentials, restores.
//
// # Invariants
//
//   - Tenants are kept apart by the NATS server, not by Forever: each is an
//     account, so a tenant's credential reaches its own agents and chunk
//     stream only, and two tenants may use the same agent id
//     (TestTenantsApart).
//   - A tenant's daemon answers its clients only on reply subjects under
//     _INBOX. (auth.CheckReply: others are refused, counted and audited),
//     and only as agentd's replier, a user of the account that may publish
//     nowhere else (auth.TenantReplierUser, agentd.Deps.Reply): an answer
//     the check let through is refused by the server, never stored
//     (TestRepliesOnlyToInboxes). A client's consumers are ordered ones
//     (ack none) and it may not ack: the server answers an ack on the
//     acker's reply subject (TestClientConsumersAreNotAcked).
//   - A credential works when tenant create returns: the record is written
//     by compare-and-set, the account pushed, and the tenant's daemon is
//     ready before the reply (TestTenantsApart, TestFrontDoorRefusals,
//     TestAccess).
//   - Revocation and disabling cut live access at once, on every path:
//     NATS connections, API tokens, OIDC tokens, open streams and
//     WebSockets (TestRevocationCutsAccess: NATS connections, API
//     tokens, streams).
//   - Without a valid bearer token an HTTP request gets 401 (403 for a
//     disabled tenant, an OIDC token naming a tenant nobody created, or a
//     path its role does not reach) before any handler runs. A token in
//     the query (access_token) counts only on the WebSocket endpoint
//     (TestFrontDoorRefusals).
//   - A tenant's move keeps every agent's events in order with their
//     writers and epochs, a fiber running across it ends with each step
//     completed once, fits the account's streams limit with the quota set to what
//     the tenant used unsharded (the limit has room for the copy while
//     Moving: moveRoom), leaves no unsharded stream, and verify is clean
//     after it (TestMoveTenant). No daemon of the tenant runs while it
//     copies: the copy waits until the tenant's lease bucket holds no
//     node's heartbeat, and a node that keeps one (an earlier release)
//     refuses the move; one move of a tenant runs at a time (its lock,
//     lockMove: a second is refused before it stops the tenant).
//   - Every admin request gets an answer: bad input a 400 saying what is
//     wrong, a tenant or credential nobody created a 404
//     (TestAdminBadRequests); every admin operation, refused ones too, is
//     in the audit log (TestAdminAudited).
//   - The account JWT pushed is always of the tenant's latest record:
//     pushes are serialized and read the latest revision, and a disabled
//     tenant's daemon stops before its account refuses connections.
//
// # Usage
//
//	d, _ := agentd.New(cfg) // cfg.Auth
//	tenancy.Attach(d, func(td *agentd.Daemon) error {
//		return wireAgents(td) // as a daemon without auth is wired
//	})
//	d.Run(ctx)
package tenancy
