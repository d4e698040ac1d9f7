package chat

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
)

// Message roles.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleSystem    = "system"
)

// Part types, following the AI SDK's UI message parts.
const (
	PartText      = "text"
	PartReasoning = "reasoning"
	// PartTool is a tool call (AI SDK "dynamic-tool"): ToolCallID, ToolName,
	// State, Input, and Output once known.
	PartTool = "dynamic-tool"
	// PartSubagent is the data part naming the sub-agent a tool call of
	// the message runs (ID: the call id; Data: a ChildRef).
	PartSubagent = chunk.Subagent
)

// Tool part states.
const (
	ToolInputStreaming = "input-streaming"
	ToolInputAvailable = "input-available"
	ToolOutput         = "output-available"
	ToolOutputError    = "output-error"
	// ToolApprovalRequested: the call waits for a user's approval
	// (Part.Approval.ID names the request).
	ToolApprovalRequested = "approval-requested"
	// ToolApprovalResponded: the user answered; the call is being ended.
	ToolApprovalResponded = "approval-responded"
	// ToolOutputDenied: the user denied the call; it did not run.
	ToolOutputDenied = "output-denied"
)

// ToolApproval is a tool part's approval request and, once answered, the
// answer, as the AI SDK keeps them.
type ToolApproval struct {
	ID       string `json:"id"`
	Approved *bool  `json:"approved,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// Message is one conversation message as stored and shown to clients.
type Message struct {
	ID        string `json:"id"`
	Role      string `json:"role"`
	Parts     []Part `json:"parts"`
	RequestID string `json:"requestId,omitempty"`
	// Hidden messages go to the provider but are never returned by
	// Store.Messages.
	Hidden    bool      `json:"hidden,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// Part is one piece of a message.
type Part struct {
	Type       string          `json:"type"`
	Text       string          `json:"text,omitempty"`
	ToolCallID string          `json:"toolCallId,omitempty"`
	ToolName   string          `json:"toolName,omitempty"`
	State      string          `json:"state,omitempty"`
	Input      json.RawMessage `json:"input,omitempty"`
	Output     json.RawMessage `json:"output,omitempty"`
	ErrorText  string          `json:"errorText,omitempty"`
	// Approval is set on a tool part whose call needed approval.
	Approval *ToolApproval `json:"approval,omitempty"`
	// ID and Data are a data part's (type "data-<name>", IsData): its
	// id and value, as the AI SDK keeps them.
	ID   string          `json:"id,omitempty"`
	Data json.RawMessage `json:"data,omitempty"`
	// Blobs names the fields stored by reference (Config.Blobs): a
	// payload over Config.BlobThreshold is stored once in the blob store
	// and the stored part holds its reference; readers get the bytes
	// back (a messages page over NATS keeps a reference to a payload too
	// large for its reply).
	Blobs *PartBlobs `json:"blobs,omitempty"`
}

// IsData reports whether p is a data part (type "data-<name>", such as
// PartSubagent).
func (p Part) IsData() bool { return strings.HasPrefix(p.Type, chunk.DataPrefix) }

// Text returns the concatenated text parts of m.
func (m Message) Text() string { return partsText(m.Parts) }

func partsText(ps []Part) string {
	var b strings.Builder
	for _, p := range ps {
		if p.Type == PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// hasContent reports whether ps holds anything worth persisting.
func hasContent(ps []Part) bool {
	for _, p := range ps {
		if p.Text != "" || p.Type == PartTool || p.IsData() {
			return true
		}
	}
	return false
}

// mergeParts returns base followed by more, joining a text part at the end
// of base with a text part at the start of more (a continuation of the same
// text). Neither input is modified.
func mergeParts(base, more []Part) []Part {
	out := append([]Part(nil), base...)
	for i, p := range more {
		if i == 0 && len(out) > 0 && p.Type == PartText && out[len(out)-1].Type == PartText {
			out[len(out)-1].Text += p.Text
			continue
		}
		out = append(out, p)
	}
	return out
}

// toLLM converts the conversation to provider messages: text parts as text,
// tool parts as tool calls followed by a tool message with their results.
// Reasoning is not sent back.
func toLLM(msgs []Message) []llm.Message {
	// Sized for a tool message after each message (the usual case in a
	// tool loop), so the conversation is not copied again as it grows.
	out := make([]llm.Message, 0, 2*len(msgs))
	for _, m := range msgs {
		var role llm.Role
		switch m.Role {
		case RoleUser:
			role = llm.RoleUser
		case RoleAssistant:
			role = llm.RoleAssistant
		default:
			continue
		}
		lm := llm.Message{Role: role, Parts: make([]llm.Part, 0, len(m.Parts))}
		var results []llm.Part
		for _, p := range m.Parts {
			switch p.Type {
			case PartText:
				if p.Text != "" {
					lm.Parts = append(lm.Parts, llm.Part{Text: p.Text})
				}
			case PartTool:
				if role != llm.RoleAssistant {
					continue
				}
				lm.Parts = append(lm.Parts, llm.Part{ToolCall: &llm.ToolCall{ID: p.ToolCallID, Name: p.ToolName, Input: p.Input}})
				switch p.State {
				case ToolOutput:
					results = append(results, llm.Part{ToolResult: &llm.ToolResult{CallID: p.ToolCallID, Output: string(p.Output)}})
				case ToolOutputError:
					results = append(results, llm.Part{ToolResult: &llm.ToolResult{CallID: p.ToolCallID, Output: p.ErrorText, IsError: true}})
				case ToolOutputDenied:
					text := ErrTextDenied
					if p.Approval != nil && p.Approval.Reason != "" {
						text += ": " + p.Approval.Reason
					}
					results = append(results, llm.Part{ToolResult: &llm.ToolResult{CallID: p.ToolCallID, Output: text, IsError: true}})
				default:
					// Providers want every call answered: a call left
					// without an answer (the user wrote on instead) says so.
					results = append(results, llm.Part{ToolResult: &llm.ToolResult{CallID: p.ToolCallID, Output: ErrTextUnanswered, IsError: true}})
				}
			}
		}
		if len(lm.Parts) > 0 {
			out = append(out, lm)
		}
		if len(results) > 0 {
			out = append(out, llm.Message{Role: llm.RoleTool, Parts: results})
		}
	}
	return out
}
