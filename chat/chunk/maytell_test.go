package chunk

import (
	"encoding/json"
	"testing"
)

// TestMayTellSkipsOnlySilentChunks: a chunk mayTell skips is one whose
// decode tells see nothing, so the streams view's row is what decoding
// every chunk makes of it. Types written escaped, out of MarshalJSON's
// field order, or not at all are decoded.
func TestMayTellSkipsOnlySilentChunks(t *testing.T) {
	var bodies [][]byte
	for _, typ := range []string{Start, StartStep, TextStart, TextDelta, TextEnd, ReasoningDelta,
		ToolInputStart, ToolInputDelta, ToolInput, ToolOutput, ToolOutputError, FinishStep,
		Finish, Error, Abort, Subagent, Restart} {
		c := Chunk{Type: typ, ID: "b", MessageID: "m", Delta: "d\"\\", RequestID: "r", ErrorText: "boom"}
		body, err := c.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, body)
	}
	bodies = append(bodies,
		[]byte(`{"type":"\u0073tart","messageId":"m2","requestId":"r2"}`), // escaped: decoded
		[]byte(`{"messageId":"m3","type":"start"}`),                       // type not first: decoded
		[]byte(`{"type":"err`),                                            // unterminated: decoded, fails
		[]byte(`not json`),
	)
	for _, body := range bodies {
		var want, got StreamInfo
		if c, err := decode(body); err == nil {
			want.see(c)
		}
		if mayTell(body) {
			if c, err := decode(body); err == nil {
				got.see(c)
			}
		}
		if got != want {
			w, _ := json.Marshal(want)
			g, _ := json.Marshal(got)
			t.Errorf("%s: with mayTell %s, decoding all %s", body, g, w)
		}
	}
	for _, body := range [][]byte{[]byte(`{"type":"text-delta","id":"b","delta":"x"}`), []byte(`{"type":"finish-step"}`)} {
		if mayTell(body) {
			t.Errorf("mayTell(%s) = true, want a delta or a step's end skipped", body)
		}
	}
	if !mayTell([]byte(`{"type":"\u0073tart"}`)) {
		t.Error("an escaped type is skipped, want it decoded")
	}
}
