package chat

import (
	"encoding/json"

	"github.com/forever-agents/forever/chat/cost"
	"github.com/forever-agents/forever/chat/llm"
)

// Event types the chat agent appends to an agent's events subject, with
// their data:
const (
	EventMessageAppended   = "message.appended"   // Message {id, role, parts, requestId, hidden, createdAt}
	EventMessageUpdated    = "message.updated"    // {id, parts}: replaces the parts of an existing message
	EventMessagesTruncated = "messages.truncated" // {afterId}: drops every message after afterId
	EventTurnStarted       = "turn.started"       // TurnInfo's request context {requestId, streamId, messageId, assistantMessageId, body, tools, message?, fiberId?, parent?, traceparent?, parentSpanId?}: message is the user Message a Send's turn answers, fiberId its fiber, parent the call of a sub-agent's turn, traceparent and parentSpanId its invoke_agent span
	EventTurnCompleted     = "turn.completed"     // {requestId, finishReason, message?, usage?}: message and usage (record format 8, Config.EndRecordsWritable) are the turn's assistant message and usage, read as the message.appended and usage.recorded stored before it otherwise
	EventTurnFailed        = "turn.failed"        // {requestId, error, code?}: code 402 for a spent budget
	EventTurnInterrupted   = "turn.interrupted"   // {requestId, reason}
	EventTurnSteered       = "turn.steered"       // {requestId, message}: a user message added to the running turn (MultitaskSteer); the messages view stores the message, the turn's next model call reads it
	EventStateSet          = "state.set"          // {version, value}
	EventUsageRecorded     = "usage.recorded"     // {requestId, input, output, steps?, subagents?: {input, output, calls}, cost?: "0.0042"}
	EventInterruptSet      = "interrupt.set"      // {name}
	EventInterruptCleared  = "interrupt.cleared"  // {name}
)

// InterruptTurn is the interrupt flag a running turn checks between deltas.
const InterruptTurn = "turn"

type messageUpdated struct {
	ID    string `json:"id"`
	Parts []Part `json:"parts"`
}

type messagesTruncated struct {
	AfterID string `json:"afterId"`
}

type turnStarted struct {
	RequestID          string          `json:"requestId"`
	StreamID           string          `json:"streamId"`
	MessageID          string          `json:"messageId"`
	AssistantMessageID string          `json:"assistantMessageId"`
	Body               json.RawMessage `json:"body,omitempty"`
	Tools              []llm.Tool      `json:"tools,omitempty"`
	// Continues is the id of the assistant message a ContinueLastTurn
	// appends to; empty for a normal turn.
	Continues string `json:"continues,omitempty"`
	// Base and Answers are set on a turn that resumes a message waiting
	// for tool answers (Agent.Answer): the message's parts when it
	// resumed, and the answers.
	Base    []Part       `json:"base,omitempty"`
	Answers []ToolAnswer `json:"answers,omitempty"`
	// Message is the user message a Send's turn answers (its id is
	// MessageID), stored with the turn so that neither is ever stored
	// without the other; absent from turns stored before it was added,
	// whose message is only in its message.appended.
	Message *Message `json:"message,omitempty"`
	// FiberID is the id of the turn's fiber, started just before; absent
	// from turns stored before it was added.
	FiberID string `json:"fiberId,omitempty"`
	// Parent is set on a sub-agent's turn: the call that started it.
	Parent *ParentRef `json:"parent,omitempty"`
	// TraceParent is the W3C traceparent of the turn's invoke_agent span
	// and ParentSpanID (16 hex digits) the id of that span's parent, ""
	// when the turn began its trace: the run that finishes the turn after
	// a crash resumes the span with them. Absent without tracing.
	TraceParent  string `json:"traceparent,omitempty"`
	ParentSpanID string `json:"parentSpanId,omitempty"`
	// Version is the version of the code that started the turn (its
	// fiber runner's, fiber.Config.Version); absent when unversioned.
	Version string `json:"version,omitempty"`
	// Batch, Window and QueuedAt are set on a queued message of a
	// MultitaskMerge or MultitaskDebounce batch (its queue fiber's
	// snapshot, batch.go): Batch is the request id of the batch's turn
	// (the first message's own), Window the batch's quiet window in ms
	// (on the first message), QueuedAt when the message was queued (unix
	// ms).
	Batch    string `json:"batch,omitempty"`
	Window   int64  `json:"windowMs,omitempty"`
	QueuedAt int64  `json:"queuedAt,omitempty"`
	// Merged are the messages a batch's turn answers after Message, in
	// the order they came, and MergedFrom their queued request ids: stored
	// with the turn, as Message is.
	Merged     []Message `json:"merged,omitempty"`
	MergedFrom []string  `json:"mergedFrom,omitempty"`
	// rewrite is SendRequest.rewrite, for the event id; not stored.
	rewrite string
}

type turnEnded struct {
	RequestID    string `json:"requestId"`
	FinishReason string `json:"finishReason,omitempty"`
	Error        string `json:"error,omitempty"`
	Reason       string `json:"reason,omitempty"`
	// Code is the failure's code when it has one a client reads (402: a
	// budget is spent).
	Code int `json:"code,omitempty"`
	// A turn.completed of record format 8 also holds the turn's message
	// and usage (endRecord): readers that want them decode those fields
	// alone, so the views that read only the outcome skip the message.
}

type stateSet struct {
	Version int             `json:"version"`
	Value   json.RawMessage `json:"value"`
}

type usageRecorded struct {
	RequestID string `json:"requestId"`
	Input     int64  `json:"input"`
	Output    int64  `json:"output"`
	// Steps is the usage of each step of a multi-step turn; Input and
	// Output are their sums.
	Steps []stepUsage `json:"steps,omitempty"`
	// Subagents is the usage of the turn's sub-agents, apart from Input
	// and Output (the turn's own model calls).
	Subagents *SubagentUsage `json:"subagents,omitempty"`
	// Cost is what Input and Output cost at the agent's price when the
	// turn ended (Config.Price); absent without a price.
	Cost cost.Micros `json:"cost,omitempty"`
}

type interruptFlag struct {
	Name string `json:"name"`
}
