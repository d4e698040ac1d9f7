// Package auth holds Forever's NATS credentials: the operator's keys, the
// account and user JWTs agentd's embedded server trusts, and the tenants
// minted from them.
//
// The NATS server enforces everything here; nothing in Forever checks a
// token on each message. The layout (docs/architecture.md "Tenants"):
//
//   - an operator, whose key signs every account JWT;
//   - the system account, for the server's own traffic and the resolver's
//     claim updates;
//   - the service account ("FOREVER"), agentd's own: the tenant registry,
//     the admin service, and the admin credential (<data>/admin.creds);
//   - one account per tenant, holding that tenant's streams, KV buckets
//     and agents. agentd serves it through a user of its own in the
//     account; a tenant's client credential is a user of the same account
//     limited to sending commands and reading chunks.
//
// A tenant's account carries its limits (Quota, resolved with the node's
// defaults): connections, JetStream storage, streams and consumers; a
// disabled tenant's account takes no connection. Each client credential
// (Credential) has a name, a Role and an optional expiry, carried in its
// user JWT with its role's permissions and its connections' limits.
//
// Invariants (each tested in this package or in agentd):
//   - A tenant's client may publish only the command verbs of its role
//     (forever.cmd.*.<verb>; forever.cmd.> for a writer or admin, but
//     AdminVerbs, forever.cmd.*.delete, for the admin only) and
//     forever.list and forever.cluster, subscribe only to forever.chunk.>, forever.bcast.> and
//     _INBOX.>, and use only the JetStream API calls an ordered consumer of
//     the chunks streams needs, under ClientAPIPrefix (agentd forwards them
//     to $JS.API, counting them against the tenant's rate, and refuses a
//     call on any stream but the log's chunks streams: the unsharded one
//     or a shard's, FOREVER_CHUNKS_<k>), never $JS.API itself. It cannot
//     write events or chunks, manage streams, or read another tenant's
//     subjects, because those live in another account.
//   - agentd answers a tenant's clients as its replier in the tenant's
//     account (TenantReplierUser), which may publish only under
//     InboxPrefix and subscribe to nothing: the server refuses an answer
//     on any other subject, so a reply subject a client chose cannot make
//     an answer a write into the account's streams or KV buckets, even
//     one CheckReply let through.
//   - A revoked client credential is in its account's revocation list: the
//     server refuses it on connect and closes live connections when the
//     account JWT is updated. An expired one is refused by the server on
//     its own (the user JWT's exp).
//   - The parsers of what operators type (ParseRole, ParseExpiry,
//     ParseLimit, ParseRate) never accept a negative limit, an unknown
//     role or an expiry outside a second to 10 years; they are fuzzed.
//   - Seeds never leave the key directory (0600 files in a 0700 dir) except
//     inside a creds file written for its user; no error or log names one.
//   - An HTTP token is stored only as its SHA-256 hash. The admin's HTTP
//     token (AdminToken) is stored nowhere: it is a claim signed by the
//     service account's key, verified by any node with the same keys,
//     and it expires (at most MaxAdminTokenTTL).
package auth
