package chunk

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/forever-agents/forever/eventlog"
)

// Chunk types, following the AI SDK's UI message stream, so the HTTP gateway
// forwards stored chunks as they are. A stream is start, then start-step,
// text-*, reasoning-* and tool-* chunks, finish-step, and one terminal chunk:
// finish, error or abort.
const (
	Start           = "start"
	StartStep       = "start-step"
	TextStart       = "text-start"
	TextDelta       = "text-delta"
	TextEnd         = "text-end"
	ReasoningStart  = "reasoning-start"
	ReasoningDelta  = "reasoning-delta"
	ReasoningEnd    = "reasoning-end"
	ToolInputStart  = "tool-input-start"
	ToolInputDelta  = "tool-input-delta"
	ToolInput       = "tool-input-available"
	ToolOutput      = "tool-output-available"
	ToolOutputError = "tool-output-error"
	// ToolInputError reports a tool call whose input the model got wrong
	// (not JSON, or cut off): Input holds what it sent, as a JSON string
	// when it was not JSON, and ErrorText why; the call ends there.
	ToolInputError = "tool-input-error"
	// ToolApprovalRequest asks the user to approve the call ToolCallID;
	// ApprovalID names the request. The turn ends waiting for the answer.
	ToolApprovalRequest = "tool-approval-request"
	// ToolOutputDenied ends a call the user denied.
	ToolOutputDenied = "tool-output-denied"
	FinishStep       = "finish-step"
	Finish           = "finish"
	Error            = "error"
	Abort            = "abort"
)

// Data parts: an AI SDK data part is a chunk of type "data-<name>" whose
// Data holds its value and ID names it; a later data chunk of the same
// type and ID replaces the part's value, as the AI SDK's clients do.
const (
	DataPrefix = "data-"
	// Subagent is the data part naming the sub-agent a tool call runs:
	// its agent, request and stream ids (package chat's ChildRef), so a
	// client can follow the child's own stream.
	Subagent = "data-subagent"
	// Restart is the data part that starts a turn's answer again: a
	// version of the agent whose policy is restart recovered the turn
	// (data: {"from": version, "to": version}). What the stream showed
	// before it is dropped from the message; a client showing the stream
	// clears the answer there.
	Restart = "data-restart"
)

// Chunk is one piece of a chat stream: one LLM turn's output. Its JSON form is
// a UI message stream chunk; RequestID is ours, set on the start chunk.
type Chunk struct {
	Type           string          `json:"type"`
	ID             string          `json:"id,omitempty"`
	MessageID      string          `json:"messageId,omitempty"`
	Delta          string          `json:"delta,omitempty"`
	ToolCallID     string          `json:"toolCallId,omitempty"`
	ApprovalID     string          `json:"approvalId,omitempty"`
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
	// Data is the value of a data part (type "data-<name>").
	Data json.RawMessage `json:"data,omitempty"`
	// Blobs names the fields stored by reference (Offload), read back
	// with Resolve. It is ours, like RequestID: the gateway resolves it
	// and never sends it to an AI SDK client.
	Blobs *Blobs `json:"blobs,omitempty"`
}

// IsData reports whether c is a data part (type "data-<name>").
func (c Chunk) IsData() bool { return strings.HasPrefix(c.Type, DataPrefix) }

// FinishMetadata is the message metadata of a finish chunk.
type FinishMetadata struct {
	Usage *UsageMetadata `json:"usage,omitempty"`
	// FinishReason is the turn's finish reason when the chunk's own (one
	// of the AI SDK's) says less: "step-limit", or a provider's reason.
	FinishReason string `json:"finishReason,omitempty"`
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
	case Finish:
		return StatusCompleted
	case Error:
		return StatusError
	case Abort:
		return StatusAborted
	}
	return ""
}

// Event types of chunks on the chunks stream: a chunk is stored as one
// EventChunk event whose data is the chunk's JSON, or, when that is larger
// than the server's max payload, as EventPart events (chunkPart: the JSON's
// bytes in order) that an Assembler joins.
const (
	EventChunk = "chunk"
	EventPart  = "chunk.part"
	// EventExpired is the marker chunk retention (Sweeper) appends to a
	// stream's subject after purging its chunks: its data is the stream's
	// StreamInfo at that time, and the streams projection marks the stream
	// Expired. It is not a chunk: Assembler.Add answers it with ErrExpired.
	EventExpired = "stream.expired"
)

// chunkPart is one piece of a chunk too large for one message.
type chunkPart struct {
	Index int    `json:"i"`
	Part  int    `json:"part"`
	Parts int    `json:"parts"`
	Bytes []byte `json:"b"`
}

// SplitPart reports whether a stored chunk event of type typ is one part of
// a chunk split across several events (split), and which part it is: 0 for
// the first, -1 when data does not decode. A reader that starts inside a
// split chunk (a cursor on one of its parts) skips to the next whole chunk.
func SplitPart(typ string, data []byte) (part int, split bool) {
	if typ != EventPart {
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

// IndexOf returns the index of the chunk a stored chunk event belongs to,
// read from its id (<stream>/<index>, or <stream>/<index>.<part> for a
// part); ok is false for an id of another form. A stream's first chunk has
// index 0, so a stream whose first stored event has a larger index lost its
// start.
func IndexOf(e eventlog.Event) (index int, ok bool) {
	rest, found := strings.CutPrefix(e.ID, e.Stream+"/")
	if !found || e.Stream == "" {
		return 0, false
	}
	rest, _, _ = strings.Cut(rest, ".")
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
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
		return nil, fmt.Errorf("chunk: chunk limit %d too small", limit)
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
// events in stream order; it is not safe for concurrent use. The zero value
// is ready to use.
type Assembler struct {
	index int
	parts [][]byte
}

// Add takes one chunk event. It returns the chunk and true when one is
// complete. A malformed event or a part out of order is an error, and so is
// a packed record (EventChunks) of more than one chunk: read those with
// Chunks.
func (a *Assembler) Add(typ string, data []byte) (Chunk, bool, error) {
	switch typ {
	case EventChunks:
		cs, err := a.Chunks(typ, data)
		if err != nil {
			return Chunk{}, false, err
		}
		if len(cs) != 1 {
			return Chunk{}, false, fmt.Errorf("chunk: a packed record of %d chunks: read it with Assembler.Chunks", len(cs))
		}
		return cs[0], true, nil
	case EventChunk:
		c, err := decode(data)
		if err != nil {
			return Chunk{}, false, fmt.Errorf("chunk: decode chunk: %w", err)
		}
		return c, true, nil
	case EventPart:
		var p chunkPart
		if err := json.Unmarshal(data, &p); err != nil {
			return Chunk{}, false, fmt.Errorf("chunk: decode chunk part: %w", err)
		}
		if p.Part == 0 {
			a.index, a.parts = p.Index, a.parts[:0]
		}
		if p.Index != a.index || p.Part != len(a.parts) || p.Parts <= p.Part {
			return Chunk{}, false, fmt.Errorf("chunk: chunk %d part %d of %d out of order", p.Index, p.Part, p.Parts)
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
		c, err := decode(body)
		if err != nil {
			return Chunk{}, false, fmt.Errorf("chunk: decode joined chunk %d: %w", p.Index, err)
		}
		return c, true, nil
	case EventExpired:
		return Chunk{}, false, fmt.Errorf("%w: the stream's chunks were purged by retention", ErrExpired)
	default:
		return Chunk{}, false, fmt.Errorf("chunk: unknown chunk event type %q", typ)
	}
}

// Chunks takes one chunk event and returns the chunks it completes, in
// order: one for an EventChunk or a split chunk's last part, none for
// another part, all of them for a packed record (EventChunks). A malformed
// event or a part out of order is an error. The caller owns the slice.
func (a *Assembler) Chunks(typ string, data []byte) ([]Chunk, error) {
	if typ != EventChunks {
		c, ok, err := a.Add(typ, data)
		if err != nil || !ok {
			return nil, err
		}
		return []Chunk{c}, nil
	}
	first, bodies, err := unpack(data)
	if err != nil {
		return nil, err
	}
	out := make([]Chunk, 0, len(bodies))
	for k, b := range bodies {
		c, err := decode(b)
		if err != nil {
			return nil, fmt.Errorf("chunk: decode chunk %d: %w", first+k, err)
		}
		out = append(out, c)
	}
	return out, nil
}
