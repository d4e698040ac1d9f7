// Package quota enforces a tenant's quotas (auth.Quota) in the tenant's
// daemon, before a command writes anything: the request rate (Allow, at
// the entry points: a NATS command, an HTTP request), the number of agents
// and the bytes stored (Admit, for commands that write), and the server's
// own refusal of a write over the account's JetStream limit (OverStorage).
// Concurrent turns are bounded by the chat type's turn limiter, sized from
// Quota().Turns.
//
// # Invariants
//
//   - A refusal happens before anything is written: a refused request
//     leaves the log as it was. The bytes quota admits a write command
//     only when the stored bytes plus WriteCost of its payload fit, and the
//     account's server limit (auth.Quota.StoreLimit) keeps an eighth more,
//     so the turns it admitted finish instead of stopping halfway with an
//     active turn.
//   - The quota enforced is the tenant's record resolved with the node's
//     defaults (agentd.Config.TenantQuota): every tenant is bounded unless
//     created with unlimited.
//   - A refusal is an *Error (429, with the Retry-After to send); a quota
//     that could not be checked because JetStream did not answer is a 503
//     error, never a silent admission.
//   - A nil *Enforcer allows everything, so a daemon without quotas needs
//     no special case.
package quota
