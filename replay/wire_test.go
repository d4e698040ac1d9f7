package replay

import (
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
)

// A chunk type the gateway does not know is forwarded whole but for our
// requestId, after whatever the buffer already held.
func TestAppendWireUnknownType(t *testing.T) {
	got := string(appendWire([]byte("data: "), chunk.Chunk{Type: "data-x", ID: "1", RequestID: "r"}))
	if want := `data: {"type":"data-x","id":"1"}`; got != want {
		t.Fatalf("appendWire = %s, want %s", got, want)
	}
}

// A data part (data-subagent) reaches clients with its id and data, the
// fields of the AI SDK's data chunk schema.
func TestAppendWireDataPart(t *testing.T) {
	got := string(appendWire(nil, chunk.Chunk{Type: chat.PartSubagent, ID: "call_1", Data: []byte(`{"agent":"kid","streamId":"s1"}`), RequestID: "r"}))
	if want := `{"type":"data-subagent","id":"call_1","data":{"agent":"kid","streamId":"s1"}}`; got != want {
		t.Fatalf("appendWire = %s, want %s", got, want)
	}
}
