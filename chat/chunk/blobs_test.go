package chunk_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/blob"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// countingStore is a real blob store that counts its Puts.
type countingStore struct {
	*blob.Store
	puts int
}

func (s *countingStore) Put(ctx context.Context, data []byte) (blob.Ref, error) {
	s.puts++
	return s.Store.Put(ctx, data)
}

// Offload stores each raw field over the threshold once and leaves only
// its reference, the stored JSON reads back with the reference (through
// an Assembler, as every reader does), and Resolve gives the chunk as it
// was. A chunk at or under the threshold is stored exactly as before; a
// field the chunk already names by reference is not stored again.
func TestOffloadResolve(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	js, err := jetstream.New(eventlogtest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	st, err := blob.Open(t.Context(), js, blob.Config{})
	if err != nil {
		t.Fatal(err)
	}
	bs := &countingStore{Store: st}
	const threshold = 1024
	big := func(c byte) json.RawMessage {
		b, _ := json.Marshal(strings.Repeat(string(c), 4096))
		return b
	}
	for _, c := range []chunk.Chunk{
		{Type: chunk.ToolOutput, ToolCallID: "c1", Output: big('o')},
		{Type: chunk.ToolInput, ToolCallID: "c1", ToolName: "t", Input: big('i')},
		{Type: chunk.ToolInputError, ToolCallID: "c1", ToolName: "t", Input: big('e'), ErrorText: "bad"},
		{Type: "data-x", ID: "d1", Data: big('d')},
	} {
		puts := bs.puts
		stored, err := chunk.Offload(t.Context(), bs, threshold, c)
		if err != nil {
			t.Fatal(err)
		}
		if bs.puts != puts+1 || len(stored.Blobs.Refs()) != 1 || len(stored.Input)+len(stored.Output)+len(stored.Data) != 0 {
			t.Fatalf("%s: stored %+v after %d puts, want one reference and no payload", c.Type, stored, bs.puts-puts)
		}
		b, err := json.Marshal(stored)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 256 {
			t.Fatalf("%s: stored chunk of %d bytes: %s", c.Type, len(b), b)
		}
		var a chunk.Assembler
		read, ok, err := a.Add(chunk.EventChunk, b)
		if err != nil || !ok || !reflect.DeepEqual(read, stored) {
			t.Fatalf("%s: read back %+v (%v), want %+v", c.Type, read, err, stored)
		}
		got, err := chunk.Resolve(t.Context(), bs, read)
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Fatalf("%s: resolved %+v (%v), want %+v", c.Type, got, err, c)
		}
		// Offloading again what already names its reference stores nothing.
		again := c
		again.Blobs = stored.Blobs
		if s2, err := chunk.Offload(t.Context(), bs, threshold, again); err != nil || bs.puts != puts+1 || !reflect.DeepEqual(s2, stored) {
			t.Fatalf("%s: offload of a chunk holding its reference: %+v (%v), %d puts", c.Type, s2, err, bs.puts-puts)
		}
	}

	small := chunk.Chunk{Type: chunk.ToolOutput, ToolCallID: "c2", Output: json.RawMessage(`{"ok":true}`)}
	stored, err := chunk.Offload(t.Context(), bs, threshold, small)
	if err != nil || !reflect.DeepEqual(stored, small) {
		t.Fatalf("small chunk stored as %+v (%v)", stored, err)
	}
	// Deltas stay inline whatever their size.
	delta := chunk.Chunk{Type: chunk.TextDelta, ID: "t1", Delta: strings.Repeat("x", 4096)}
	if stored, err := chunk.Offload(t.Context(), bs, threshold, delta); err != nil || !reflect.DeepEqual(stored, delta) {
		t.Fatalf("delta stored as %+v (%v)", stored, err)
	}
	// Chunks may not hold references: the payload stays, Blobs goes.
	withRef := chunk.Chunk{Type: chunk.ToolOutput, ToolCallID: "c3", Output: big('o'), Blobs: &chunk.Blobs{Output: &blob.Ref{}}}
	if stored, err := chunk.Offload(t.Context(), nil, 0, withRef); err != nil || stored.Blobs != nil || string(stored.Output) != string(withRef.Output) {
		t.Fatalf("inline: stored as %+v (%v)", stored, err)
	}
	// A missing object is an error, and the chunk comes back unchanged.
	gone := chunk.Chunk{Type: chunk.ToolOutput, ToolCallID: "c4", Blobs: &chunk.Blobs{Output: &blob.Ref{Digest: blob.RefOf([]byte("x")).Digest, Size: 1}}}
	if got, err := chunk.Resolve(t.Context(), bs, gone); err == nil || !strings.Contains(err.Error(), "no object") || !reflect.DeepEqual(got, gone) {
		t.Fatalf("resolve of a missing object: %+v, %v", got, err)
	}
}
