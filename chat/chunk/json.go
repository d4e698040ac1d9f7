package chunk

import (
	"encoding/json"
	"fmt"

	"github.com/forever-agents/forever/internal/jsonstr"
)

// MarshalJSON encodes c by hand, field by field with json.Marshal's
// omitempty rules, without reflection: chunks are written at token rate.
// A raw field (input, output, metadata) that is not valid JSON is an error.
func (c Chunk) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 48+len(c.Delta)+len(c.ID)+len(c.Input)+len(c.Output))
	b = append(b, `{"type":`...)
	b = jsonstr.Append(b, c.Type)
	str := func(name, v string) {
		if v != "" {
			b = append(b, name...)
			b = jsonstr.Append(b, v)
		}
	}
	str(`,"id":`, c.ID)
	str(`,"messageId":`, c.MessageID)
	str(`,"delta":`, c.Delta)
	str(`,"toolCallId":`, c.ToolCallID)
	str(`,"approvalId":`, c.ApprovalID)
	str(`,"toolName":`, c.ToolName)
	str(`,"inputTextDelta":`, c.InputTextDelta)
	for _, f := range []struct {
		name string
		v    json.RawMessage
	}{{`,"input":`, c.Input}, {`,"output":`, c.Output}} {
		if len(f.v) > 0 {
			if !json.Valid(f.v) {
				return nil, fmt.Errorf("chunk: chunk %s: %s is not valid JSON", c.Type, f.name[2:len(f.name)-2])
			}
			b = append(b, f.name...)
			b = append(b, f.v...)
		}
	}
	str(`,"errorText":`, c.ErrorText)
	str(`,"finishReason":`, c.FinishReason)
	if len(c.MessageMetadata) > 0 {
		if !json.Valid(c.MessageMetadata) {
			return nil, fmt.Errorf("chunk: chunk %s: messageMetadata is not valid JSON", c.Type)
		}
		b = append(b, `,"messageMetadata":`...)
		b = append(b, c.MessageMetadata...)
	}
	str(`,"requestId":`, c.RequestID)
	if len(c.Data) > 0 {
		if !json.Valid(c.Data) {
			return nil, fmt.Errorf("chunk: chunk %s: data is not valid JSON", c.Type)
		}
		b = append(b, `,"data":`...)
		b = append(b, c.Data...)
	}
	if c.Blobs != nil && c.Blobs.Refs() != nil {
		bl, err := json.Marshal(c.Blobs)
		if err != nil {
			return nil, err
		}
		b = append(b, `,"blobs":`...)
		b = append(b, bl...)
	}
	return append(b, '}'), nil
}

// decode decodes a stored chunk. Chunks in the form MarshalJSON writes
// with string fields only (text and reasoning deltas, starts and ends: all
// but a handful per turn) are read without reflection; anything else goes
// through encoding/json. Both give the same Chunk.
func decode(data []byte) (Chunk, error) {
	var c Chunk
	if fastChunk(data, &c) {
		return c, nil
	}
	c = Chunk{}
	err := json.Unmarshal(data, &c)
	return c, err
}

// fastChunk reads data in MarshalJSON's field order when every field present
// is a string; it reports false for anything else, leaving c partly set.
func fastChunk(b []byte, c *Chunk) bool {
	b, ok := jsonstr.Cut(b, `{"type":`)
	if !ok {
		return false
	}
	if c.Type, b, ok = jsonstr.Read(b); !ok {
		return false
	}
	for _, f := range [...]struct {
		name string
		dst  *string
	}{
		{`,"id":`, &c.ID}, {`,"messageId":`, &c.MessageID}, {`,"delta":`, &c.Delta},
		{`,"toolCallId":`, &c.ToolCallID}, {`,"approvalId":`, &c.ApprovalID}, {`,"toolName":`, &c.ToolName},
		{`,"inputTextDelta":`, &c.InputTextDelta},
		// input, output, messageMetadata and data are raw JSON: a chunk with one
		// of them stops here and falls back.
		{`,"errorText":`, &c.ErrorText}, {`,"finishReason":`, &c.FinishReason},
		{`,"requestId":`, &c.RequestID},
	} {
		if rest, ok := jsonstr.Cut(b, f.name); ok {
			if *f.dst, b, ok = jsonstr.Read(rest); !ok {
				return false
			}
		}
	}
	return len(b) == 1 && b[0] == '}'
}
