package eventlog

// TypeForked is the type of a fork's first event, which agentd's fork verb
// appends on the new agent's events subject: the new agent shares its
// parent's history up to Forked.Upto by reference (the parent's events and
// chunks are not copied), and its own events follow.
const TypeForked = "agent.forked"

// Forked is the data of a TypeForked event.
type Forked struct {
	// Parent is the agent the fork was made from.
	Parent string `json:"parent"`
	// Upto is the sequence of the parent's last event when it was forked.
	Upto Seq `json:"upto"`
	// At is the id of the parent's message the fork's conversation ends
	// with, "" for the whole conversation.
	At string `json:"at,omitempty"`
	// Messages is how many of the parent's messages (its conversation's
	// first positions, hidden ones included) the fork inherits.
	Messages uint64 `json:"messages"`
}
