package chunk

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzChunkJSON: the hand encoder's output decodes to the same chunk as
// encoding/json's, for any field values, and fails where it fails.
func FuzzChunkJSON(f *testing.F) {
	f.Add("text-delta", "t0", "", "hé\"llo<", "", "", "", "", "", "", []byte(nil), []byte(nil), []byte(nil))
	f.Add("tool-input-available", "", "m1", "", "c1", "search", "", "", "", "r1", []byte(`{"q": "x"}`), []byte(`{"usage":{"inputTokens":1}}`), []byte(nil))
	f.Add("data-subagent", "c1", "", "", "", "", "", "", "", "", []byte(nil), []byte(nil), []byte(`{"agent": "a"}`))
	f.Fuzz(func(t *testing.T, typ, id, msgID, delta, callID, tool, errText, reason, inDelta, reqID string, input, md, data []byte) {
		c := Chunk{Type: typ, ID: id, MessageID: msgID, Delta: delta, ToolCallID: callID, ToolName: tool,
			ErrorText: errText, FinishReason: reason, InputTextDelta: inDelta, RequestID: reqID,
			Input: json.RawMessage(input), MessageMetadata: json.RawMessage(md), Data: json.RawMessage(data)}
		type plain Chunk // the same fields without the MarshalJSON method
		want, werr := json.Marshal(plain(c))
		got, gerr := c.MarshalJSON()
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("errors differ: encoding/json %v, ours %v", werr, gerr)
		}
		if werr != nil {
			return
		}
		var a, b plain
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatalf("ours is not JSON: %s: %v", got, err)
		}
		if err := json.Unmarshal(want, &b); err != nil {
			t.Fatal(err)
		}
		a.Input, a.MessageMetadata, a.Data = compact(a.Input), compact(a.MessageMetadata), compact(a.Data)
		b.Input, b.MessageMetadata, b.Data = compact(b.Input), compact(b.MessageMetadata), compact(b.Data)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("ours %s\nwant %s", got, want)
		}
	})
}

func compact(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	// Canonical: the same JSON value however it is written (spaces,
	// escapes such as \u0026 for &, key order).
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		var buf bytes.Buffer
		json.Compact(&buf, raw)
		return buf.Bytes()
	}
	b, _ := json.Marshal(v)
	return b
}

// FuzzDecodeChunk: whenever the fast path accepts stored bytes, encoding/json
// decodes the same chunk from them; and every chunk MarshalJSON writes with
// string fields only is taken by the fast path.
func FuzzDecodeChunk(f *testing.F) {
	for _, s := range []string{
		`{"type":"text-delta","id":"t0","delta":"h\u00e9\"llo\n"}`,
		`{"type":"finish","messageMetadata":{"usage":{"inputTokens":1}}}`,
		`{"type":"start","messageId":"m1","requestId":"r1"}`,
		`{"type":"data-subagent","id":"c1","data":{"agent":"a"}}`,
		`{"type":"error","errorText":"boom"}`,
		`{"type":"x","id":"a","id":"b"}`,
		`{"type":"x"} `,
		`{"TYPE":"x"}`,
	} {
		f.Add([]byte(s), "text-delta", "t0", "d")
	}
	f.Fuzz(func(t *testing.T, data []byte, typ, id, delta string) {
		var fast Chunk
		if fastChunk(data, &fast) {
			var want Chunk
			if err := json.Unmarshal(data, &want); err != nil || !reflect.DeepEqual(fast, want) {
				t.Fatalf("fast %+v, encoding/json %+v, %v for %s", fast, want, err, data)
			}
		}
		c := Chunk{Type: typ, ID: id, Delta: delta}
		enc, err := c.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if !fastChunk(enc, &Chunk{}) {
			t.Fatalf("fast path refused %s", enc)
		}
		got, err := decode(enc)
		var want Chunk
		_ = json.Unmarshal(enc, &want)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("decode(%s) = %+v, %v; want %+v", enc, got, err, want)
		}
	})
}
