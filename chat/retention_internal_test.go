package chat

import (
	"testing"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// Reading a stream that retention purged finds its expiry marker: not a
// decode error, but no chunk and no first sequence, so loadTurnStream
// reports ErrChunksExpired against the view's FirstSeq.
func TestReadStreamSkipsExpiryMarker(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	if _, err := lg.Append(t.Context(), eventlog.Event{Agent: "a1", Stream: "s1", Type: chunk.EventExpired, ID: "s1/expired", Data: []byte(`{"status":"error"}`)}); err != nil {
		t.Fatal(err)
	}
	b, first, err := readStream(t.Context(), lg, "a1", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if first != 0 || b.chunks != 0 {
		t.Fatalf("first %d, %d chunks; want none", first, b.chunks)
	}
}
