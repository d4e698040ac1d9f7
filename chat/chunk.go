package chat

import (
	"encoding/json"
	"fmt"
)

// Chunk types, following the AI SDK's UI message stream, so the HTTP gateway
// forwards stored chunks as they are.
const (
	ChunkStart           = "start"
	ChunkStartStep       = "start-step"
	ChunkTextStart       = "text-start"
	ChunkTextDelta       = "text-delta"
	ChunkTextEnd         = "text-end"
	ChunkReasoningStart  = "reasoning-start"
	ChunkReasoningDelta  = "reasoning-delta"
	ChunkReasoningEnd    = "reasoning-end"
	ChunkToolInputStart  = "tool-input-start"
	ChunkToolInputDelta  = "tool-input-delta"
	ChunkToolInput       = "tool-input-available"
	ChunkToolOutput      = "tool-output-available"
	ChunkToolOutputError = "tool-output-error"
	ChunkFinishStep      = "finish-step"
	ChunkFinish          = "finish"
	ChunkError           = "error"
	ChunkAbort           = "abort"
)

// Chunk is one piece of a chat stream: one LLM turn's output. Its JSON form is
// a UI message stream chunk; RequestID is ours, set on the start chunk.
type Chunk struct {
	Type           string          `json:"type"`
	ID             string          `json:"id,omitempty"`
	MessageID      string          `json:"messageId,omitempty"`
	Delta          string          `json:"delta,omitempty"`
	ToolCallID     string          `json:"toolCallId,omitempty"`
	ToolName       string          `json:"toolName,omitempty"`
	InputTextDelta string          `json:"inputTextDelta,omitempty"`
	Input          json.RawMessage `json:"input,omitempty"`
	Output         json.RawMessage `json:"output,omitempty"`
	ErrorText      string          `json:"errorText,omitempty"`
	FinishReason   string          `json:"finishReason,omitempty"`
	// MessageMetadata is the AI SDK's message metadata; the finish chunk
	// carries the turn's usage in it ({"usage":{...}}).
	MessageMetadata json.RawMessage `json:"messageMetadata,omitempty"`
	RequestID       string          `json:"requestId,omitempty"`
}

// FinishMetadata is the message metadata of a finish chunk.
type FinishMetadata struct {
	Usage *UsageMetadata `json:"usage,omitempty"`
}

// UsageMetadata is a turn's token usage as the finish chunk carries it.
type UsageMetadata struct {
	InputTokens  int64 `json:"inputTokens"`
	OutputTokens int64 `json:"outputTokens"`
}

// Terminal reports whether c ends its stream.
func (c Chunk) Terminal() bool { return c.EndStatus() != "" }

// EndStatus returns the status a terminal chunk gives its stream
// (StatusCompleted, StatusError or StatusAborted), "" for any other chunk.
func (c Chunk) EndStatus() string {
	switch c.Type {
	case ChunkFinish:
		return StatusCompleted
	case ChunkError:
		return StatusError
	case ChunkAbort:
		return StatusAborted
	}
	return ""
}

// Event types of chunks on the chunks stream.
const (
	evChunk     = "chunk"
	evChunkPart = "chunk.part"
)

// chunkPart is one piece of a chunk too large for one message.
type chunkPart struct {
	Index int    `json:"i"`
	Part  int    `json:"part"`
	Parts int    `json:"parts"`
	Bytes []byte `json:"b"`
}

// ChunkPart reports whether a stored chunk event of type typ is one part of
// a chunk split across several events (split), and which part it is: 0 for
// the first, -1 when data does not decode. A reader that starts inside a
// split chunk (a cursor on one of its parts) skips to the next whole chunk.
func ChunkPart(typ string, data []byte) (part int, split bool) {
	if typ != evChunkPart {
		return 0, false
	}
	var p struct {
		Part *int `json:"part"`
	}
	if json.Unmarshal(data, &p) != nil || p.Part == nil {
		return -1, true
	}
	return *p.Part, true
}

// split returns the encoded chunk as one body, or as parts of at most limit
// bytes each once encoded.
func split(body []byte, index, limit int) ([][]byte, error) {
	if len(body) <= limit {
		return [][]byte{body}, nil
	}
	// base64 grows 4/3; leave room for the part's fields.
	per := (limit - 64) * 3 / 4
	if per <= 0 {
		return nil, fmt.Errorf("chat: chunk limit %d too small", limit)
	}
	n := (len(body) + per - 1) / per
	out := make([][]byte, 0, n)
	for k := range n {
		seg := body[k*per : min((k+1)*per, len(body))]
		b, err := json.Marshal(chunkPart{Index: index, Part: k, Parts: n, Bytes: seg})
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// Assembler turns chunk events back into chunks, joining split parts. Feed it
// events in stream order; it is not safe for concurrent use.
type Assembler struct {
	index int
	parts [][]byte
}

// Add takes one chunk event. It returns the chunk and true when one is
// complete. A malformed event or a part out of order is an error.
func (a *Assembler) Add(typ string, data []byte) (Chunk, bool, error) {
	switch typ {
	case evChunk:
		c, err := decodeChunk(data)
		if err != nil {
			return Chunk{}, false, fmt.Errorf("chat: decode chunk: %w", err)
		}
		return c, true, nil
	case evChunkPart:
		var p chunkPart
		if err := json.Unmarshal(data, &p); err != nil {
			return Chunk{}, false, fmt.Errorf("chat: decode chunk part: %w", err)
		}
		if p.Part == 0 {
			a.index, a.parts = p.Index, a.parts[:0]
		}
		if p.Index != a.index || p.Part != len(a.parts) || p.Parts <= p.Part {
			return Chunk{}, false, fmt.Errorf("chat: chunk %d part %d of %d out of order", p.Index, p.Part, p.Parts)
		}
		a.parts = append(a.parts, p.Bytes)
		if len(a.parts) < p.Parts {
			return Chunk{}, false, nil
		}
		var body []byte
		for _, b := range a.parts {
			body = append(body, b...)
		}
		a.parts = a.parts[:0]
		c, err := decodeChunk(body)
		if err != nil {
			return Chunk{}, false, fmt.Errorf("chat: decode joined chunk %d: %w", p.Index, err)
		}
		return c, true, nil
	default:
		return Chunk{}, false, fmt.Errorf("chat: unknown chunk event type %q", typ)
	}
}
