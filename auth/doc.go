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
// Invariants (each tested in this package or in agentd):
//   - A tenant's client may publish only on forever.cmd.> (but the admin
//     verbs, forever.cmd.*.delete: ClientMay) and forever.list, subscribe
//     only to forever.chunk.>, forever.bcast.> and _INBOX.>, and use only
//     the JetStream API calls
//     an ordered consumer of the chunks stream needs. It cannot write
//     events or chunks, manage streams, or read another tenant's subjects,
//     because those live in another account.
//   - A revoked client credential is in its account's revocation list: the
//     server refuses it on connect and closes live connections when the
//     account JWT is updated.
//   - Seeds never leave the key directory (0600 files in a 0700 dir) except
//     inside a creds file written for its user; no error or log names one.
//   - An HTTP token is stored only as its SHA-256 hash.
package auth
