package chathost

import (
	"context"

	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat"
)

// SubagentProgress is the broadcast a chat agent sends its watchers (on
// <prefix>.bcast.<agent> and GET /v1/agents/{id}/events, stored in the
// agent events stream, so a watcher resumes it from a cursor) each time
// one of its sub-agent calls starts or ends:
// {"type":"broadcast","data":{"subagent":{...}}}.
type SubagentProgress struct {
	Subagent SubagentLink `json:"subagent"`
}

// SubagentLink is one sub-agent call as its parent's watchers see it:
// the link event (subagent.started, subagent.ended), the child's agent,
// turn and stream (to follow it), its status (running, then completed,
// failed, cancelled...), the parent's turn, and the error of a call that
// did not complete.
type SubagentLink struct {
	Event string `json:"event"`
	chat.ChildRef
	ParentRequestID string `json:"parentRequestId"`
	Error           string `json:"error,omitempty"`
}

// broadcastLinks returns the chat.Config.OnLink of an agent: each stored
// sub-agent link is broadcast to its watchers (host.Env.Broadcast), then
// next, if any, is called. A broadcast that fails is logged: the link is
// stored, and the agent's status and log show it.
func broadcastLinks(env *host.Env, next func(context.Context, string, chat.ChildLink)) func(context.Context, string, chat.ChildLink) {
	return func(ctx context.Context, typ string, l chat.ChildLink) {
		p := SubagentProgress{Subagent: SubagentLink{Event: typ, ChildRef: l.ChildRef, ParentRequestID: l.ParentRequestID, Error: l.Error}}
		if err := env.Broadcast(context.WithoutCancel(ctx), p); err != nil {
			env.Logger.Warn("broadcast sub-agent progress", "child", l.Agent, "event", typ, "err", err)
		}
		if next != nil {
			next(ctx, typ, l)
		}
	}
}
