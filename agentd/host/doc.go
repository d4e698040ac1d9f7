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
// ErrorHandler and Deactivator. The host answers status, fibers and
// schedules itself (Verbs) for every type; a verb a type did not register
// is 404 before anything is activated.
//
// An agent reaches other agents through Env.Command: the same command
// path as a client's (Host.Command), routed to each agent's owner on any
// node; chat's sub-agents start, cancel and notify each other this way.
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
