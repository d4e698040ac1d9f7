package host

import (
	"context"
	"encoding/json"

	"github.com/forever-agents/forever/agents"
	"github.com/forever-agents/forever/fiber"
)

// Verbs are the verbs the host answers for an agent of any type on
// forever.cmd.<agent>.<verb>; each type registers its own (Host.Register).
var Verbs = []string{"status", "fibers", "schedules", "meta", "delete", "log", "fork"}

// Status is the reply to the status command.
type Status struct {
	Agent     string `json:"agent"`
	Type      string `json:"type"`
	Active    bool   `json:"active"`
	Fibers    int    `json:"fibers"`
	Schedules int    `json:"schedules"`
	KeepAlive int    `json:"keepalive"`
	// Partition is the agent's partition; Owner the server name of the
	// node that owns it (and answered), Epoch that node's lease epoch.
	Partition int    `json:"partition"`
	Owner     string `json:"owner"`
	Epoch     uint64 `json:"epoch"`
	// Agent is what the agent adds when it handles "status" itself.
	Detail any `json:"detail,omitempty"`
	// Entry is the agent's entry in the listing (agents.Entry: status,
	// user, tags, activity, children), nil for an agent without events.
	Entry *agents.Entry `json:"entry,omitempty"`
	// Version is the version of the agent type's code on the node that
	// answered, and VersionPolicy what that node does with work another
	// version started (SetVersion). WorkVersions are the versions that
	// started the agent's running work (its fibers: chat turns and the
	// like), sorted; an old version has drained once it is gone from
	// every agent's (agentd agents --version).
	Version       string              `json:"version"`
	VersionPolicy fiber.VersionPolicy `json:"versionPolicy"`
	WorkVersions  []string            `json:"workVersions,omitempty"`
}

// FiberInfo is one row of the fibers command's reply.
type FiberInfo struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Attempt is the recovery attempt since the fiber last made progress
	// (0 while it progresses), the count Config.MaxAttempts bounds.
	Attempt int `json:"attempt"`
	// Recoveries is how many times the fiber was recovered, ever.
	Recoveries int `json:"recoveries"`
	// Version is the version of the code that started the fiber, ""
	// when unversioned; LastVersion the version a recovery moved it to,
	// when another.
	Version     string          `json:"version,omitempty"`
	LastVersion string          `json:"lastVersion,omitempty"`
	CreatedAt   string          `json:"createdAt"`
	Snapshot    json.RawMessage `json:"snapshot,omitempty"`
	// Ops are the fiber's steps, when the request asked for them
	// (FibersRequest).
	Ops []OpInfo `json:"ops,omitempty"`
}

func (h *Host) status(ctx context.Context, cmd Command, typ string) (any, error) {
	rows, err := h.table.Rows(cmd.Agent)
	if err != nil {
		return nil, err
	}
	scheds, err := h.sched.List(cmd.Agent)
	if err != nil {
		return nil, err
	}
	st := Status{Agent: cmd.Agent, Type: typ, Active: h.Active(cmd.Agent), Fibers: len(rows), Schedules: len(scheds), KeepAlive: h.pool.Held(cmd.Agent)}
	st.Partition = h.partitionOf(cmd.Agent)
	tv := h.VersionOf(typ)
	st.Version, st.VersionPolicy, st.WorkVersions = tv.Version, tv.Policy, runningVersions(rows)
	if e, ok, err := h.agents.Get(cmd.Agent, h.Types()); err != nil {
		return nil, err
	} else if ok {
		st.Entry = &e
	}
	h.mu.Lock()
	if pt := h.mu.parts[st.Partition]; pt != nil {
		st.Owner, st.Epoch = pt.lease.Node, pt.lease.Epoch
	}
	h.mu.Unlock()
	if st.Active {
		h.mu.Lock()
		inst := h.mu.agents[cmd.Agent]
		h.mu.Unlock()
		if inst != nil {
			<-inst.built
			if ch, ok := inst.agent.(CommandHandler); ok && inst.err == nil {
				if detail, err := ch.HandleCommand(ctx, cmd); err == nil {
					st.Detail = detail
				}
			}
		}
	}
	if fn := h.details[typ]; st.Detail == nil && fn != nil {
		// Not active here (deactivated while it waits, say): the views
		// still tell.
		if detail, err := fn(ctx, cmd.Agent); err == nil {
			st.Detail = detail
		}
	}
	return st, nil
}
