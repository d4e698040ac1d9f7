package chat

import (
	"encoding/json"
	"testing"
)

// A turn finalized after a crash between its finish chunk and usage.recorded
// gets the usage back from the finish chunk's metadata.
func TestFinishChunkCarriesUsage(t *testing.T) {
	md, _ := json.Marshal(FinishMetadata{Usage: &UsageMetadata{InputTokens: 12, OutputTokens: 345}})
	stored, _ := json.Marshal(Chunk{Type: ChunkFinish, FinishReason: "stop", MessageMetadata: md})
	var c Chunk
	if err := json.Unmarshal(stored, &c); err != nil {
		t.Fatal(err)
	}
	b := newBuilder()
	b.add(c)
	if b.terminal != ChunkFinish || b.finish != "stop" || b.usage == nil || b.usage.InputTokens != 12 || b.usage.OutputTokens != 345 {
		t.Fatalf("builder after finish: terminal %q finish %q usage %+v", b.terminal, b.finish, b.usage)
	}
	// A finish chunk without metadata (older streams) leaves usage unknown.
	b = newBuilder()
	b.add(Chunk{Type: ChunkFinish})
	if b.usage != nil {
		t.Fatalf("usage from nothing: %+v", b.usage)
	}
}
