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
// ErrorHandler, Deactivator and StoreLostHandler. The host answers status, fibers and
// schedules itself (Verbs) for every type; a verb a type did not register
// is 404 before anything is activated.
//
// Each partition this node acquires is served by one goroutine
// (servePartition): it catches the views up with the whole log, activates
// every agent of the partition with orphaned fibers (activation recovers
// them), and when the lease goes, deactivates them; their fibers stay in
// the runs view for the next owner.
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
//   - Reads answer: status, fibers and schedules wait at most a second for
//     the views to apply the agent's last event, then answer from what the
//     views hold (the log cannot say its last event: a stream without a
//     leader, a full store in a cluster).
//   - A forwarded command is sent to the next owner only when the node it
//     reached says the agent is not there (the Forever-Not-Here header of
//     its error reply); any other error, 503s included, is relayed as is.
//   - When the log lost the agents' events (the events stream deleted or
//     purged), every active agent is stopped, chat turns end with an error
//     chunk, and nothing is activated until the views were rebuilt.
//   - Errors leave as micro service errors with a code (StatusCode: 400,
//     404, 409, 413, 429, 503, 504, 500) and a one-line message.
//
// # Usage
//
//	h := host.New(host.Config{DefaultType: "chat"})
//	h.Register("steps", demo.NewStepsAgent, demo.StepsVerbs...)
//	h.Register("chat", chats.Factory, chathost.Verbs...)
//	h.Attach(d) // d is an *agentd.Daemon, not yet running
package host
