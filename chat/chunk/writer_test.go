package chunk_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

func runBatcher(t *testing.T, lg *eventlog.Log) *eventlog.Batcher {
	b := lg.NewBatcher(eventlog.BatcherConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return b
}

func readChunks(t *testing.T, lg *eventlog.Log, agent, stream string) []chunk.Chunk {
	t.Helper()
	evs, err := lg.Read(t.Context(), eventlog.Filter{Agent: agent, Stream: stream}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var a chunk.Assembler
	var out []chunk.Chunk
	for _, e := range evs {
		cs, err := a.Chunks(e.Type, e.Data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, cs...)
	}
	return out
}

// A chunk larger than the server's max payload is split into parts and
// joined again by readers; the stream metadata counts it once.
func TestOversizedChunkSplitAndJoined(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{MaxPayload: 64 << 10})
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{})
	pr, err := lg.NewProjector(chunk.StreamsProjection())
	if err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunProjector(t, pr)
	w := chunk.NewWriter(runBatcher(t, lg), "a1", "s1", 0, lg.MaxPayload())
	big := strings.Repeat("é0123456789", 30000) // ~360 KB, multi-byte runes across part edges
	want := []chunk.Chunk{
		{Type: chunk.Start, MessageID: "m1", RequestID: "r1"},
		{Type: chunk.TextStart, ID: "t1"},
		{Type: chunk.TextDelta, ID: "t1", Delta: big},
		{Type: chunk.TextEnd, ID: "t1"},
		{Type: chunk.Finish},
	}
	for _, c := range want {
		if err := w.Write(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	seq, err := w.Flush(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := readChunks(t, lg, "a1", "s1")
	if len(got) != len(want) {
		t.Fatalf("read %d chunks, want %d", len(got), len(want))
	}
	if got[2].Delta != big {
		t.Fatalf("joined delta differs: %d bytes, want %d", len(got[2].Delta), len(big))
	}
	if err := pr.WaitFor(t.Context(), seq); err != nil {
		t.Fatal(err)
	}
	info, err := chunk.NewStreams(mustView(t, lg)).Latest("a1")
	if err != nil {
		t.Fatal(err)
	}
	if info.Stream != "s1" || info.Status != chunk.StatusCompleted || info.Chunks != 5 || info.RequestID != "r1" || info.MessageID != "m1" || info.LastSeq != seq {
		t.Fatalf("stream info = %+v", info)
	}
}

func mustView(t *testing.T, lg *eventlog.Log) *eventlog.View {
	v, err := lg.View(chunk.StreamsProjectionName)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestMergeDeltas: with MergeDeltas, deltas written while the chunk before
// them still waits in the Batcher's queue join it, so a burst is stored as
// one chunk with the same text; a delta of another block, or a chunk of
// another type, starts a new one. Without it every delta is a chunk.
func TestMergeDeltas(t *testing.T) {
	lg := eventlogtest.OpenOn(t, eventlogtest.RunServer(t, eventlogtest.ServerOptions{}), eventlog.Config{})
	written := []chunk.Chunk{
		{Type: chunk.TextStart, ID: "t1"},
		{Type: chunk.TextDelta, ID: "t1", Delta: "Hel"},
		{Type: chunk.TextDelta, ID: "t1", Delta: "lo, "},
		{Type: chunk.TextDelta, ID: "t1", Delta: "wörld"},
		{Type: chunk.TextEnd, ID: "t1"},
		{Type: chunk.ReasoningStart, ID: "r1"},
		{Type: chunk.ReasoningDelta, ID: "r1", Delta: "a"},
		{Type: chunk.ReasoningDelta, ID: "r1", Delta: "b"},
		{Type: chunk.ReasoningEnd, ID: "r1"},
		{Type: chunk.ToolInputStart, ToolCallID: "c1", ToolName: "x"},
		{Type: chunk.ToolInputDelta, ToolCallID: "c1", InputTextDelta: `{"q":`},
		{Type: chunk.ToolInputDelta, ToolCallID: "c1", InputTextDelta: `1}`},
		{Type: chunk.ToolInputDelta, ToolCallID: "c2", InputTextDelta: `{}`},
	}
	merged := []chunk.Chunk{
		written[0],
		{Type: chunk.TextDelta, ID: "t1", Delta: "Hello, wörld"},
		written[4], written[5],
		{Type: chunk.ReasoningDelta, ID: "r1", Delta: "ab"},
		written[8], written[9],
		{Type: chunk.ToolInputDelta, ToolCallID: "c1", InputTextDelta: `{"q":1}`},
		written[12],
	}
	for _, c := range []struct {
		name string
		opts []chunk.WriterOption
		want []chunk.Chunk
	}{
		{"merged", []chunk.WriterOption{chunk.MergeDeltas()}, merged},
		{"each", nil, written},
		{"packed", []chunk.WriterOption{chunk.MergeDeltas(), chunk.PackChunks()}, merged},
		{"packed-each", []chunk.WriterOption{chunk.PackChunks()}, written},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The Batcher runs only once all is written: every chunk waits
			// in its queue, as behind a batch being stored.
			b := lg.NewBatcher(eventlog.BatcherConfig{})
			w := chunk.NewWriter(b, "a1", c.name, 0, lg.MaxPayload(), c.opts...)
			for _, ch := range written {
				if err := w.Write(t.Context(), ch); err != nil {
					t.Fatal(err)
				}
			}
			if w.Written() != len(c.want) {
				t.Errorf("Written() = %d, want %d", w.Written(), len(c.want))
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- b.Run(ctx) }()
			defer func() { cancel(); <-done }()
			if _, err := w.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
			got := readChunks(t, lg, "a1", c.name)
			if len(got) != len(c.want) {
				t.Fatalf("stored %d chunks, want %d: %+v", len(got), len(c.want), got)
			}
			for i := range got {
				if !reflect.DeepEqual(got[i], c.want[i]) {
					t.Errorf("chunk %d = %+v, want %+v", i, got[i], c.want[i])
				}
			}
		})
	}
}

// TestMergeDeltasAfterSent: a delta written once the one before it was
// taken into a batch is a chunk of its own; nothing already sent changes.
func TestMergeDeltasAfterSent(t *testing.T) {
	lg := eventlogtest.OpenOn(t, eventlogtest.RunServer(t, eventlogtest.ServerOptions{}), eventlog.Config{})
	w := chunk.NewWriter(runBatcher(t, lg), "a1", "s1", 0, lg.MaxPayload(), chunk.MergeDeltas())
	for _, d := range []string{"a", "b", "c"} {
		if err := w.Write(t.Context(), chunk.Chunk{Type: chunk.TextDelta, ID: "t1", Delta: d}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	got := readChunks(t, lg, "a1", "s1")
	if len(got) != 3 || got[0].Delta != "a" || got[1].Delta != "b" || got[2].Delta != "c" {
		t.Fatalf("stored %+v, want the three deltas as they were", got)
	}
}
