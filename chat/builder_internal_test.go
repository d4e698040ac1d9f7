package chat

import (
	"encoding/json"
	"github.com/forever-agents/forever/chat/chunk"
	"testing"
)

// A turn finalized after a crash between its finish chunk and usage.recorded
// gets the usage back from the finish chunk's metadata.
func TestFinishChunkCarriesUsage(t *testing.T) {
	md, _ := json.Marshal(chunk.FinishMetadata{Usage: &chunk.UsageMetadata{InputTokens: 12, OutputTokens: 345}})
	stored, _ := json.Marshal(chunk.Chunk{Type: chunk.Finish, FinishReason: "stop", MessageMetadata: md})
	var c chunk.Chunk
	if err := json.Unmarshal(stored, &c); err != nil {
		t.Fatal(err)
	}
	b := newBuilder()
	b.add(c)
	if b.terminal != chunk.Finish || b.finish != "stop" || b.usage == nil || b.usage.InputTokens != 12 || b.usage.OutputTokens != 345 {
		t.Fatalf("builder after finish: terminal %q finish %q usage %+v", b.terminal, b.finish, b.usage)
	}
	// A finish chunk without metadata (older streams) leaves usage unknown.
	b = newBuilder()
	b.add(chunk.Chunk{Type: chunk.Finish})
	if b.usage != nil {
		t.Fatalf("usage from nothing: %+v", b.usage)
	}
}

// TestDataParts: a data-* chunk becomes a part of its type, id and data; a
// later one of the same type and id replaces the data in place, as the AI
// SDK's clients do; one without an id is another part.
func TestDataParts(t *testing.T) {
	b := newBuilder()
	b.add(chunk.Chunk{Type: chunk.ToolInput, ToolCallID: "c1", ToolName: "agent", Input: json.RawMessage(`{}`)})
	b.add(chunk.Chunk{Type: PartSubagent, ID: "c1", Data: json.RawMessage(`{"status":"running"}`)})
	b.add(chunk.Chunk{Type: "data-note", Data: json.RawMessage(`1`)})
	b.add(chunk.Chunk{Type: PartSubagent, ID: "c1", Data: json.RawMessage(`{"status":"completed"}`)})
	b.add(chunk.Chunk{Type: "data-note", Data: json.RawMessage(`2`)})
	ps := b.Parts()
	if len(ps) != 4 {
		t.Fatalf("parts = %+v, want the call, the subagent part and two notes", ps)
	}
	if p := ps[1]; p.Type != PartSubagent || p.ID != "c1" || string(p.Data) != `{"status":"completed"}` || !p.IsData() {
		t.Errorf("subagent part = %+v", p)
	}
	if string(ps[2].Data) != "1" || string(ps[3].Data) != "2" {
		t.Errorf("notes = %+v, %+v", ps[2], ps[3])
	}
	if !hasContent(ps[1:2]) {
		t.Error("a data part is not content")
	}
}
