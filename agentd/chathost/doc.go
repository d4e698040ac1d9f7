// Package chathost hosts chat agents (package chat) on an agentd host: the
// chat agent type, which opens the chat read side and the shared chunk
// batcher when the daemon starts and builds one chat.Agent per agent id;
// its NATS verbs (Verbs: chat, messages, cancel, interrupt, state, approve,
// tool-result, child-result, the internal read child-turn, and the reads
// approvals, streams and usage, also served as GET /v1/agents/{id}/approvals, /streams and /usage by
// host.AttachHTTP); the sub-agents' way to other agents (chat.Peers over
// host.Env.Command); a chat stream's chunks from any cursor (AttachReads:
// GET /v1/agents/{id}/streams/{stream}/chunks?after=&limit=); the HTTP gateway (AttachGateway: the AI SDK UI message
// stream over SSE, the WebSocket resume handshake and the chat page, any
// node answering for any agent); and chunk retention (AttachRetention).
//
// Each chat state change (the state verb, or chat.Agent.SetState from
// Go) is published to the agent's clients once stored
// (host.Env.PublishState on <prefix>.bcast.<agent>), and Type is the
// host.StateSource of GET /v1/agents/{id}/events. See package host for
// when to use broadcasts and state rather than the turn's data-* parts.
//
// A read of an agent's streams (the streams verb, the gateway's resume)
// is served once this node's streams view applied the agent's last chunk
// stored, so a read right after a turn shows its chunks; the wait is
// bounded (5 s), after which, and while the views are stalled, the view is
// read as it is (TestStreamsWaitForTheView, TestStreamsAnswerPastTheWait).
//
// # Usage
//
//	chats := chathost.NewType(provider, nil)
//	h := host.New(host.Config{DefaultType: "chat"})
//	forking := chats.Forking()
//	h.RegisterType(host.TypeSpec{Name: "chat", Factory: chats.Factory,
//		Verbs: chathost.Verbs, Internal: chathost.InternalVerbs,
//		StatusDetail: chats.StatusDetail, OnDelete: chats.OnDelete(h.Command),
//		Forking: &forking})
//	chats.Attach(d)
//	h.Attach(d)
//	chathost.AttachGateway(d, h, chats)
//	chathost.AttachRetention(d, h, chats)
//	chathost.AttachReads(d, h)
//	host.AttachHTTP(d, h, host.HTTPConfig{State: chats})
//
// # Sub-agents
//
// A chat agent's sub-agent calls (chat.AgentTool, chat.NewAgentTool) go
// through the host's command path, so the child runs on its owner's node
// and forwarding and ownership apply:
//
//   - start: the chat verb to the child, {"text", "requestId": the call's
//     chat.ChildRequestID, "parent": chat.ParentRef {agent, requestId,
//     callId, mode, chain}}; a start sent again returns the same turn;
//   - cancel: the cancel verb, {"requestId": the child turn}: only that
//     turn is cancelled, if it is the child's active one (without a
//     request id, cancel stops whatever turn is active, as before);
//   - notice: the child-result verb to the parent, chat.ChildNotice
//     {child, requestId, parentRequestId, callId}, answered {"ok": true}:
//     it activates the parent if it was deactivated (its waiting turn is
//     recovered) and wakes the waiting turn; the parent reads the child's
//     outcome from the log, never from the notice;
//   - read: with owned views (each node's views hold only the partitions
//     it owns), the parent reads its child's turn with the child-turn verb
//     on the child's owner, {"requestId"}, answered with chat.TurnOutcome
//     (chat.ChildTurnReader); without them it reads its own views, which
//     hold every agent;
//   - delete: a child deleted (the delete verb) never ends its turn, so
//     its delete hook (Type.OnDelete, host.SetOnDelete) sends its parent
//     the notice of its last turn once the delete is done: the parent,
//     activated if it was not, finds the turn gone and fails the call with
//     a tool error instead of waiting for ever.
//
// Answers 400, 404, 409 and 413 end the call with a tool error
// (chat.ErrChildRefused); 503, 504 and timeouts are retried with the same
// request id. Each command waits at most 30 s.
//
// # Invariants
//
//   - A chat command is answered once its user message and turn are
//     appended to the log (chat.Agent.Send): an acknowledged chat is never
//     lost.
//   - The gateway reads an agent's views only after catching them up with
//     the log's last event of the agent, so any node answers a read with
//     what the owner wrote, whichever node it was.
//   - Over a tenant's turns quota a chat is refused with 429 (a quota.Error)
//     before anything is written; over the node's --max-turns, with 429 and Retry-After at once.
//     The node's bound holds across the tenants of one agentd: their chat
//     types share one limiter (Type.ShareTurns).
//   - A request whose identity's role is below writer (an approver) may
//     only answer approvals: a chat that starts a turn is 403, and its
//     client tool results are dropped.
package chathost
