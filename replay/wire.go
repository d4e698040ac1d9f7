package replay

import (
	"encoding/json"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/internal/jsonstr"
)

// appendWire appends c as the AI SDK v5 UI message stream chunk of its type,
// with only the fields that type's (strict) schema allows: our requestId and
// finishReason are left out, and required strings are present even when
// empty. An unknown type is forwarded with every field but requestId.
func appendWire(b []byte, c chunk.Chunk) []byte {
	start := len(b)
	b = append(b, `{"type":`...)
	b = jsonstr.Append(b, c.Type)
	str := func(name, v string) {
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		b = jsonstr.Append(b, v)
	}
	raw := func(name string, v json.RawMessage, orEmpty string) {
		if len(v) == 0 {
			if orEmpty == "" {
				return
			}
			v = json.RawMessage(orEmpty)
		}
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		b = append(b, v...)
	}
	switch c.Type {
	case chunk.Start:
		if c.MessageID != "" {
			str("messageId", c.MessageID)
		}
		raw("messageMetadata", c.MessageMetadata, "")
	case chunk.Finish:
		raw("messageMetadata", c.MessageMetadata, "")
	case chunk.StartStep, chunk.FinishStep, chunk.Abort:
	case chunk.TextStart, chunk.TextEnd, chunk.ReasoningStart, chunk.ReasoningEnd:
		str("id", c.ID)
	case chunk.TextDelta, chunk.ReasoningDelta:
		str("id", c.ID)
		str("delta", c.Delta)
	case chunk.ToolInputStart:
		str("toolCallId", c.ToolCallID)
		str("toolName", c.ToolName)
	case chunk.ToolInputDelta:
		str("toolCallId", c.ToolCallID)
		str("inputTextDelta", c.InputTextDelta)
	case chunk.ToolInput:
		str("toolCallId", c.ToolCallID)
		str("toolName", c.ToolName)
		raw("input", c.Input, "{}")
	case chunk.ToolOutput:
		str("toolCallId", c.ToolCallID)
		raw("output", c.Output, "null")
	case chunk.ToolOutputError:
		str("toolCallId", c.ToolCallID)
		str("errorText", c.ErrorText)
	case chunk.Error:
		str("errorText", c.ErrorText)
	default:
		c.RequestID, c.Blobs = "", nil
		full, err := json.Marshal(c)
		if err != nil {
			return b
		}
		return append(b[:start], full...)
	}
	return append(b, '}')
}

// wireChunk is c as the gateway sends it: a json.Marshaler producing
// appendWire's form, for WebSocket frames.
type wireChunk chunk.Chunk

// MarshalJSON implements json.Marshaler.
func (w wireChunk) MarshalJSON() ([]byte, error) { return appendWire(nil, chunk.Chunk(w)), nil }
