// Package host is the agent runtime that agentd hosts: it knows the
// registered agent types, activates an agent on first use (a command, a due
// schedule, or recovery of its orphaned fibers), gives it its fiber runner,
// keepalive and schedules (Env), routes commands to it over the NATS micro
// service "forever" (forever.cmd.<agent>.<verb>), and deactivates it when
// idle. In a cluster it serves only the agents of the partitions whose
// leases this node holds, and forwards every other command to the owner.
//
// # Model
//
// An agent is any value built by its type's Factory; it opts into the
// optional interfaces CommandHandler, FiberRecoverer, ScheduleHandler,
// ErrorHandler, Deactivator and StoreLostHandler. The host answers status,
// fibers, schedules, meta, delete and log itself (Verbs) for every type; a
// verb a type did not register is 404 before anything is activated.
//
// # The command path
//
// A command walks forward through four stages, each a func(next) handler
// in a file of its own, composed once (pipeline.go, buildPath); no stage
// calls back into one it left:
//
//   - edge (stage_edge.go): admit, for every endpoint of the NATS
//     service (commands, the listing, the cluster's view): the reply
//     subject, an in-flight slot, the tenant's rate, the request's
//     context; then serveCommand: subject, size, actor, span, request id;
//   - access (stage_access.go): the audit of the outcome, an agent id of
//     a type and a JSON payload, the identity's role, the tenant's quotas;
//   - route (stage_route.go; forward in route.go): a verb that runs
//     anywhere (log) runs here; any other on its agent's owner (a fork's:
//     the new agent's): here (owned), forwarded to the owner's node, or
//     once an owner took the partition;
//   - dispatch (stage_dispatch.go): the host's verbs, then the type's.
//
// Host.Command enters at access: HTTP (ServeCommand, chathost's gateway)
// and an agent's Env.Command. A forwarded command enters at the owner's
// part of route (answerForwarded: owned, then dispatch). The reply is
// JSON from dispatch on (json.RawMessage), here or forwarded alike.
//
// # Reads
//
// The reads of one agent, each a verb over NATS and a GET over HTTP
// (AttachHTTP), are what the console shows and any client may use:
//
//   - status: Status, with the agent's listing entry (Entry);
//   - fibers ({"ops": true}, ?ops=true): the running fibers from the runs
//     view, with each one's steps (OpInfo);
//   - schedules: the agent's schedules;
//   - log ({"after", "limit", "type"}, ?after=&limit=&type=): LogPage,
//     the agent's events after a cursor (a string of digits), paged, with
//     each event's writer (node and epoch), a compaction snapshot shown
//     as a summary; answered by any node from the log, without routing
//     or activating the agent;
//   - approvals, streams ({"cursor", "limit"}, ?cursor=&limit=) and usage:
//     verbs of the types that have them (chathost's chat agents; 404 for
//     the others), served here as GETs too;
//   - the cluster (ClusterSubject, <prefix>.cluster, and agentd's GET
//     /v1/cluster): agentd.ClusterInfo of the node that answers.
//
// An agent reaches other agents through Env.Command: the same command
// path as a client's (Host.Command), routed to each agent's owner on any
// node; chat's sub-agents start, cancel and notify each other this way.
//
// Each partition this node acquires is served by one goroutine
// (servePartition): it catches the views up with the whole log, activates
// every agent of the partition with orphaned fibers (activation recovers
// them), and when the lease goes, deactivates them; their fibers stay in
// the runs view for the next owner. A command of the partition's agents
// runs on this node once that recovery started, so a read never answers
// from views still catching up with the previous owner's events; until
// then it waits, within its context (owned, awaitRecovered:
// TestCommandsWaitForAPartitionsRecovery). The gauge
// forever_agentd_partitions_recovered counts the partitions held whose
// recovery finished: it equals forever_ownership_partitions_owned once
// every partition acquired has caught up (TestHostPartitionsRecovered).
//
// # Agents: listing, user context, deletion
//
// The host keeps the view of every agent (package agents, on Deps.Views):
// its status (running, waiting, failed, idle: see agents.Status*), first
// and last activity, user, tags and metadata. The user context is set by
// the "meta" of an agent's first command (any verb's payload may carry
// {"meta": {"user", "tags", "metadata"}}; it is appended as an Initial
// agents.EventMeta once the command succeeded, and ignored once the agent
// has one), or by the meta verb. Listing reads the view only:
// Host.List, the NATS endpoint <prefix>.list (ListSubject) and GET
// /v1/agents (AttachHTTP) answer agents.Page {"agents": [...], "next"}.
//
// The delete verb (Host's deleteAgent) stops the agent, refuses its
// commands meanwhile (409), keeps the compactor, scheduler and chunk
// retention off it (Serves), and calls eventlog.Log.Delete: its events
// and chunks are purged, tombstones stay, every view drops its rows, and
// the id starts a new agent from nothing. A type's delete hook
// (SetOnDelete) reads what it needs from the views before the delete and
// acts after it (chat tells a deleted sub-agent's waiting parent). Delete
// is an admin verb
// (auth.AdminVerbs, auth.Role.Allows): only a credential of the admin role
// may publish it (auth.ClientPermissions); agentd delete uses the admin
// credential and reaches a tenant through forever.admin.tenant.access.
//
// # Broadcast and live state
//
// Env.Broadcast(ctx, v) publishes {"type":"broadcast","data":v}, and
// Env.PublishState {"type":"state","version":N,"value":...} (chathost
// calls it for each chat state change, from the state verb or
// chat.Agent.SetState), on <prefix>.bcast.<agent> (BroadcastSubject) with
// a stored publish into the agent events stream (agentevents.go), kept
// per agent by count and age: a publish returns once the message is
// stored, and core NATS subscribers on any node still see it live. GET
// /v1/agents/{id}/events is the same as Server-Sent Events, after the
// agent's current state, and ?after=<cursor> resumes from a stream
// sequence with no gap and no duplicate. A NATS client does the same by
// subscribing first, then reading the state with the state verb, then
// skipping state messages not newer than it.
//
// Which to use, as the Cloudflare Agents design separates them:
// Broadcast is progress ("step 3 of 10", a status line) for whoever
// watches, kept for a while so a client that reconnects catches up from
// its cursor; one that comes later than the retention learns only the
// state. State is what a client must see when it connects (it is durable,
// versioned and compare-and-set), and its changes are broadcast too. A
// result the user waits for belongs in the chat turn's stream as a
// data-* part: stored with the turn, replayed from a cursor, part of the
// assistant message.
//
// # Invariants
//
//   - One writer per agent: the host runs an agent only while this node
//     holds its partition's lease, and the event log fences every append
//     with the lease's epoch (eventlog.Config.Owner). A conflict stops the
//     agent at once (OnFenced).
//   - A command is answered only after what it changed is appended to the
//     log, so an acknowledged command is never lost. A command refused
//     with 503 ran nowhere and may be retried; 504 (a forwarded command
//     whose owner did not answer in time) may have run.
//   - Every request gets an answer: past 1024 commands in flight, a node
//     that does not own the agent, or a node that is stopping answers 503
//     with Retry-After, never silence.
//   - A delete answers once the tombstone is in the log and this node's
//     views applied it; while it runs the agent is neither activated nor
//     written by this node's background work, and after it nothing of the
//     agent is readable on any node that caught up with the log.
//   - An events stream starts with the agent's current state, then relays
//     what is published after it subscribed, in order; state messages
//     never go back in version.
//   - Reads answer: status, fibers and schedules wait at most a second for
//     the views to apply the agent's last event, then answer from what the
//     views hold (the log cannot say its last event: a stream without a
//     leader, a full store in a cluster).
//   - While the owner's embedded server's store is full, a command that
//     writes (not a read, not an admin's delete) is refused at once with
//     a 503 naming the full store, and nothing of it is appended.
//   - A forwarded command is sent to the next owner only when the node it
//     reached says the agent is not there (the Forever-Not-Here header of
//     its error reply); any other error, 503s included, is relayed as is.
//   - When the log lost the agents' events (the events stream deleted or
//     purged), every active agent is stopped, chat turns end with an error
//     chunk, and nothing is activated until the views were rebuilt.
//   - Errors leave as micro service errors with a code (StatusCode: 400,
//     404, 409, 413, 429, 503, 504, 500) and a one-line message.
//
// # Tracing
//
// With the daemon's Config.TracerProvider, every command answered is a
// "command <verb>" server span. When the NATS request has a W3C
// traceparent header (any case), the span links to it and starts a trace
// of its own, or, with Config.TrustTraceparent, is its child, so a
// trusted caller's trace continues into the agent; a command forwarded to the agent's owner is a
// "forward <verb>" client span whose context goes in the forwarded
// request's traceparent, and the owner's "command <verb>" span
// (forever.command.forwarded) is its child. Replies (and error replies)
// carry the trace id in the Forever-Trace-Id header. In a cluster, a
// partition taken is a "partition.acquire" span and one lost or handed off
// a "partition.release" span (forever.partition, forever.partition.epoch,
// forever.node). Agents' fiber runners get the provider: their steps and
// recoveries are traced (package fiber), and the chat type's turns
// (package chat, through chathost).
//
// # Usage
//
//	h := host.New(host.Config{DefaultType: "chat"})
//	h.RegisterType(host.TypeSpec{Name: "steps", Factory: demo.NewStepsAgent, Verbs: demo.StepsVerbs})
//	h.RegisterType(host.TypeSpec{Name: "chat", Factory: chats.Factory, Verbs: chathost.Verbs,
//		StatusDetail: chats.StatusDetail, OnDelete: chats.OnDelete(h.Command)})
//	h.Attach(d) // d is an *agentd.Daemon, not yet running
//	host.AttachHTTP(d, h, host.HTTPConfig{State: chats}) // GET /v1/agents, /v1/agents/{id}/events
package host
