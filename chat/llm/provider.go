package llm

import (
	"context"
	"encoding/json"
	"iter"
)

// Provider streams one model turn.
//
// Stream returns a single-use iterator. It yields deltas in the order the
// model produced them; a successful stream ends with exactly one [Finish]
// delta. A failed stream ends with one (Delta{}, err) pair, where err is an
// [*Error] that says whether retrying can help, or the context's cause when
// ctx ended. Breaking out of the loop closes the underlying connection.
// Nothing happens until the iterator is ranged over.
//
// Implementations in this package are safe for concurrent use; each Stream
// call is independent.
type Provider interface {
	// Name is a short stable identifier: "local", "openai",
	// "chatcompletions", "anthropic".
	Name() string
	// Stream runs req and yields what the model produces.
	Stream(ctx context.Context, req Request) iter.Seq2[Delta, error]
}

// IDResumer is implemented by a Provider that says whether it continues a
// response by its id ([Continuation].ResponseID) after a crash. The chat
// layer makes a new response id durable the moment it appears (a stash:
// one synced write, and a wait for the chunks before it, per model call)
// for a provider that does, and for one that does not say (a wrapper, a
// provider of the embedder's); for the others the id is kept with the
// turn's next periodic stash. openai.Responses resumes by id; Anthropic,
// ChatCompletions and Local continue from the text so far.
type IDResumer interface {
	ResumesByID() bool
}

// ResumesByID reports whether p continues a response by its id: true
// unless p implements [IDResumer] and says otherwise.
func ResumesByID(p Provider) bool {
	r, ok := p.(IDResumer)
	return !ok || r.ResumesByID()
}

// Role is the author of a Message.
type Role string

// Roles of conversation messages.
const (
	// RoleUser messages carry text parts written by the user.
	RoleUser Role = "user"
	// RoleAssistant messages carry model text and tool calls.
	RoleAssistant Role = "assistant"
	// RoleTool messages carry tool results answering earlier tool calls.
	RoleTool Role = "tool"
)

// Request is one model call. The provider does not retain it.
type Request struct {
	// Model overrides the provider's configured model when set.
	Model string
	// System is the system prompt (instructions); empty for none.
	System string
	// Messages is the visible conversation, oldest first.
	Messages []Message
	// Tools the model may call.
	Tools []Tool
	// MaxTokens caps the output; 0 uses the provider's default.
	MaxTokens int
	// Continue, when set, asks the provider to finish an earlier, interrupted
	// answer to the same Messages instead of starting a new one. See
	// [Continuation].
	Continue *Continuation
	// IdempotencyKey is sent as the Idempotency-Key header by the remote
	// providers when set.
	IdempotencyKey string
}

// Continuation is what the chat layer persisted of an interrupted turn.
// Providers use the parts they understand:
//
//   - openai.Responses with ResponseID: resume the background stream after
//     SequenceNumber, or read the stored response and yield its text beyond
//     PartialText.
//   - Anthropic, Chat Completions, and openai.Responses without ResponseID: send
//     PartialText as an assistant message followed by a user message
//     [ContinuePrompt]; the model's answer is the rest of the text.
//   - Local: yield the rest of the same deterministic answer after PartialText.
//
// In every case the yielded text is only what comes after PartialText, so the
// caller appends it to what it already has.
type Continuation struct {
	// PartialText is the assistant text already received for this turn.
	PartialText string
	// ResponseID is the provider's response id, from a [ResponseMeta] delta.
	ResponseID string
	// SequenceNumber is the SequenceNumber of the last delta received.
	SequenceNumber int64
	// TextAtSequence is how many bytes of PartialText the provider had sent
	// up to SequenceNumber. The caller may have stored more text after it
	// recorded SequenceNumber; a stream resumed after SequenceNumber skips
	// that overlap so no text is yielded twice. Zero with a SequenceNumber
	// means all of PartialText.
	TextAtSequence int
}

// Message is one conversation entry.
type Message struct {
	Role  Role
	Parts []Part
}

// Part is one piece of a message: exactly one of Text, ToolCall or ToolResult
// is set. User messages hold text; assistant messages hold text and tool
// calls; tool messages hold tool results.
type Part struct {
	Text       string
	ToolCall   *ToolCall
	ToolResult *ToolResult
}

// ToolCall is a call the model made.
type ToolCall struct {
	ID   string
	Name string
	// Input is the arguments as the model wrote them: normally a JSON
	// object, possibly invalid JSON (see Delta.Input). Empty means {}.
	// Remote providers send an object back: Anthropic and several Chat
	// Completions servers reject anything else, so an Input that is not a
	// JSON object goes out as {"_raw_input": "<Input as a string>"}.
	Input json.RawMessage
}

// ToolResult answers the ToolCall with the same ID.
type ToolResult struct {
	CallID string
	Output string
	// IsError marks a failed call; Output then says what went wrong.
	// Anthropic sends it as is_error. The OpenAI APIs have no such flag and
	// send Output alone, so the Output of an error should read as one.
	IsError bool
}

// Tool is a function the model may call. Tools are stored (chat's
// turn.started), so the JSON names are fixed: they are the Go field names
// the untagged struct was first stored with. Never rename them.
type Tool struct {
	Name        string `json:"Name"`
	Description string `json:"Description"`
	// Schema is the JSON Schema of the input, an object schema; nil means
	// no parameters.
	Schema json.RawMessage `json:"Schema"`
}

// Text returns a message of role r with one text part.
func Text(r Role, text string) Message {
	return Message{Role: r, Parts: []Part{{Text: text}}}
}

// ContinuePrompt is the hidden user message that asks a remote model to
// continue an interrupted answer. The chat layer never shows it.
const ContinuePrompt = "Continue exactly where you left off. Do not repeat anything you already wrote; output only the rest of your answer."
