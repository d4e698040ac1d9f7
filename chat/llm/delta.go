package llm

import (
	"encoding/json"
	"strconv"
)

// DeltaKind says what a Delta carries.
type DeltaKind uint8

// Kinds of deltas.
const (
	// TextDelta carries a piece of answer text in Text.
	TextDelta DeltaKind = iota + 1
	// ReasoningDelta carries a piece of reasoning (thinking) text in Text.
	ReasoningDelta
	// ToolInputDelta carries a fragment of a tool call's JSON input in Text,
	// for ToolCallID and ToolName.
	ToolInputDelta
	// ToolCallDone carries a complete tool call: ToolCallID, ToolName, Input.
	ToolCallDone
	// Finish ends a successful stream: FinishReason and Usage.
	Finish
	// ResponseMeta carries the provider's response id in ResponseID, as soon
	// as it is known. The chat layer persists it for [Continuation].
	ResponseMeta
)

var deltaKindNames = [...]string{
	TextDelta:      "text",
	ReasoningDelta: "reasoning",
	ToolInputDelta: "tool-input",
	ToolCallDone:   "tool-call",
	Finish:         "finish",
	ResponseMeta:   "response-meta",
}

// String returns a short lowercase name.
func (k DeltaKind) String() string {
	if int(k) < len(deltaKindNames) && deltaKindNames[k] != "" {
		return deltaKindNames[k]
	}
	return "DeltaKind(" + strconv.Itoa(int(k)) + ")"
}

// Finish reasons, normalised across providers. Other provider-specific
// reasons pass through unchanged.
const (
	FinishStop      = "stop"
	FinishToolCalls = "tool_calls"
	FinishLength    = "length"
)

// Delta is one piece of a streamed turn. Which fields are set depends on
// Kind.
type Delta struct {
	Kind       DeltaKind
	Text       string
	ToolCallID string
	ToolName   string
	// Input is the complete tool input of a ToolCallDone delta, as the model
	// wrote it. It is meant to be a JSON object but may be any bytes, invalid
	// JSON included, from every provider: models make mistakes, and the
	// local model passes its /tool arguments through unchanged. Check it
	// with json.Valid before embedding it in JSON or calling the tool;
	// answering an invalid input with an error ToolResult lets the model
	// try again.
	Input json.RawMessage
	// Usage is set on the Finish delta when the provider reported it.
	Usage *Usage
	// ResponseID is the provider's id for this response, when known
	// (OpenAI Responses sets it on every delta).
	ResponseID string
	// SequenceNumber is the OpenAI Responses event sequence number of the
	// event this delta came from; 0 for other providers.
	SequenceNumber int64
	// FinishReason is set on the Finish delta.
	FinishReason string
}

// Usage counts tokens of one call.
type Usage struct {
	InputTokens  int64
	OutputTokens int64
}
