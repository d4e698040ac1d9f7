package replay

import (
	"encoding/json"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/internal/jsonstr"
)

// appendWire appends c as the AI SDK v5 UI message stream chunk of its type,
// with only the fields that type's (strict) schema allows: our requestId and
// finishReason are left out, and required strings are present even when
// empty. An unknown type is forwarded with every field but requestId.
func appendWire(b []byte, c chat.Chunk) []byte {
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
	case chat.ChunkStart:
		if c.MessageID != "" {
			str("messageId", c.MessageID)
		}
		raw("messageMetadata", c.MessageMetadata, "")
	case chat.ChunkFinish:
		raw("messageMetadata", c.MessageMetadata, "")
	case chat.ChunkStartStep, chat.ChunkFinishStep, chat.ChunkAbort:
	case chat.ChunkTextStart, chat.ChunkTextEnd, chat.ChunkReasoningStart, chat.ChunkReasoningEnd:
		str("id", c.ID)
	case chat.ChunkTextDelta, chat.ChunkReasoningDelta:
		str("id", c.ID)
		str("delta", c.Delta)
	case chat.ChunkToolInputStart:
		str("toolCallId", c.ToolCallID)
		str("toolName", c.ToolName)
	case chat.ChunkToolInputDelta:
		str("toolCallId", c.ToolCallID)
		str("inputTextDelta", c.InputTextDelta)
	case chat.ChunkToolInput:
		str("toolCallId", c.ToolCallID)
		str("toolName", c.ToolName)
		raw("input", c.Input, "{}")
	case chat.ChunkToolOutput:
		str("toolCallId", c.ToolCallID)
		raw("output", c.Output, "null")
	case chat.ChunkToolOutputError:
		str("toolCallId", c.ToolCallID)
		str("errorText", c.ErrorText)
	case chat.ChunkError:
		str("errorText", c.ErrorText)
	default:
		c.RequestID = ""
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
type wireChunk chat.Chunk

// MarshalJSON implements json.Marshaler.
func (w wireChunk) MarshalJSON() ([]byte, error) { return appendWire(nil, chat.Chunk(w)), nil }
