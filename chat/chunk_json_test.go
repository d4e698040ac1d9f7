package chat

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzChunkJSON: the hand encoder's output decodes to the same chunk as
// encoding/json's, for any field values, and fails where it fails.
func FuzzChunkJSON(f *testing.F) {
	f.Add("text-delta", "t0", "", "hé\"llo<", "", "", "", "", "", "", []byte(nil), []byte(nil))
	f.Add("tool-input-available", "", "m1", "", "c1", "search", "", "", "", "r1", []byte(`{"q": "x"}`), []byte(`{"usage":{"inputTokens":1}}`))
	f.Fuzz(func(t *testing.T, typ, id, msgID, delta, callID, tool, errText, reason, inDelta, reqID string, input, md []byte) {
		c := Chunk{Type: typ, ID: id, MessageID: msgID, Delta: delta, ToolCallID: callID, ToolName: tool,
			ErrorText: errText, FinishReason: reason, InputTextDelta: inDelta, RequestID: reqID,
			Input: json.RawMessage(input), MessageMetadata: json.RawMessage(md)}
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
		a.Input, a.MessageMetadata = compact(a.Input), compact(a.MessageMetadata)
		b.Input, b.MessageMetadata = compact(b.Input), compact(b.MessageMetadata)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("ours %s\nwant %s", got, want)
		}
	})
}

func compact(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	var buf bytes.Buffer
	json.Compact(&buf, raw)
	return buf.Bytes()
}
