package chat

import "sync"

// commands is the conversation's role of an Agent: the commands clients
// send it (Send and its multitask policies, Answer, Truncate, Rewrite,
// ContinueLastTurn, SetState, interrupts and Cancel) and its reads of the
// views (Messages, Message, Conversation, State, Usage). The Agent embeds
// it: its methods are the Agent's. A command that starts a turn does so
// through the Agent's turn slot (Agent.start); it runs no turn itself.
type commands struct {
	a *Agent

	stateMu sync.Mutex // serializes SetState
	mt      multitaskState
	// maxMerged, when positive, is a test's bound on a batch's merged
	// messages instead of maxMerged (batch.go).
	maxMerged int
}
