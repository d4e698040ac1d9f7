// Package modellimit shares a model provider's rate limits between the
// tenants of a node, fairly by weight, and slows every tenant's calls
// when the provider says it is over its limit.
//
// # Model
//
// A [Limiter] holds, per model (the provider and model a call names),
// two token buckets, calls and tokens, refilled at Config.Calls and
// Config.Tokens times this node's Share of the cluster's bounds, and one
// queue of waiting calls per tenant. [Tenant.Wait] queues a call and
// returns when it may start; the caller runs the call and reports its end
// to the done function Wait returned, with the usage and the error.
//
// Calls are let through in the order of weighted fair queueing (start-time
// fair queueing): each tenant's calls get virtual finish tags, a call's tag
// being its tenant's last tag (or the model's virtual time, when the tenant
// was idle) plus its cost divided by the tenant's weight; the waiting head
// of line with the least tag goes next. A call's cost is the part of the
// binding bound it takes: 1/calls-rate, or tokens/tokens-rate when that is
// larger. Under contention, tenants of weights 1 and 3 get calls (and
// tokens) in a 1:3 ratio; an idle tenant's share goes to the others, and
// coming back it earns no credit for its idle time.
//
// A provider's rate-limited or overloaded answer (llm.RateLimited: 429,
// 503, 529) reported to done pauses the model for every tenant until its
// Retry-After has passed (Config.Backoff, doubling up to MaxBackoff, when
// it names none), and empties the calls bucket so no burst follows the
// pause. The turn that got the answer retries, waiting in Wait like any
// other call: it does not fail.
//
// # Cluster
//
// Each node enforces its Share of the cluster's bounds exactly; the
// cluster as a whole stays within them as long as Share is 1/the nodes
// serving tenants, and is fair to the extent tenants' calls are spread
// over the nodes (an agent's turns run on its owner node). A node that
// gets a 429 pauses its own calls; the others find out from their own
// calls. This trades cluster-exact fairness for no network round trip
// before a model call; see docs/concepts.md.
//
// # Invariants
//
//   - Within a model, a call is let through only when the calls bucket
//     holds one and the tokens bucket its estimate (or is full), never
//     during a pause.
//   - Among waiting tenants, the next call is the least virtual finish
//     tag's: over any stretch where two tenants both wait, their calls
//     let through are in the ratio of their weights, within one call.
//   - An idle tenant's share is used by the others: no capacity is held
//     back while anyone waits.
//   - A rate-limited answer pauses the model until at least its
//     Retry-After; every call waiting meanwhile goes after the pause.
//   - A Wait whose ctx ends leaves its queue and takes nothing.
//
// # Usage
//
//	l, err := modellimit.New(modellimit.Config{Calls: modellimit.Rate{N: 10, Per: time.Second}})
//	t := l.Tenant("acme", 3)
//	done, err := t.Wait(ctx, "openai/gpt-4.1", estimate)
//	if err != nil { return err } // ctx ended
//	usage, err := call(ctx)
//	done(usage, err)
package modellimit
