// Package audit keeps agentd's audit log: a JetStream stream
// (FOREVER_AUDIT, in agentd's own account, where tenants cannot reach it)
// holding one JSON Record per admin operation (tenant create, revoke,
// disable, enable, token revoke, access; a restore and the minting of an
// admin credential or token, which the admin's command reports), per command that changes an agent
// (chat, approve, tool-result, state set, cancel, interrupt) and per auth
// refusal (an HTTP request refused for its token or role, a client the
// NATS server refused). Each record says who (tenant, credential name,
// role), what (action, outcome, code), which agent, when, from where, and
// which node wrote it.
//
// # Bounds
//
// The stream keeps records for Config.MaxAge (--audit-max-age, 30 days)
// and at most Config.MaxBytes (--audit-max-bytes: 1/16 of --js-max-store,
// at most 256 MiB), dropping the oldest first. Recording never blocks a
// request: records wait in a queue of QueueSize and are dropped, counted
// in forever_audit_dropped_total, when it is full. Refusals are recorded
// at most RefusalRate a second (burst RefusalBurst) for one tenant from
// one source (the client's host), and NodeRefusalRate for the node; the
// ones left out are counted (forever_audit_refusals_suppressed_total) and
// the next refusal recorded for the same tenant and source says how many
// ("suppressed"), so a client hammering with bad tokens can neither push
// the real records out of the stream nor hide another tenant's or
// another client's refusals. At most MaxRefusalKeys (tenant, source)
// pairs are tracked: an idle pair forgotten with refusals left out
// leaves a "refusals.suppressed" record saying how many.
//
// # Reading
//
// agentd audit tail (Tail) prints the last records as JSON lines, and
// with --follow the new ones as they come; it needs the admin credential.
// Without --follow the listing ends at the last record the stream's leader
// held when it began (internal/leaderread), not when its consumer says
// none pending: that consumer may sit on a replica behind the leader,
// which says so before the last record (TestTailFromReplicaBehind). A
// listing whose remaining records were removed meanwhile (age, size) ends
// too (TestTailEndsOnRecordsRemoved).
//
// # Invariants
//
//   - A command that changes an agent is recorded once, on the node that
//     received it, after it was answered, with its outcome.
//   - Nothing a tenant can reach writes or reads the stream.
//   - Records hold no secret: no token, no creds, no message text.
package audit
