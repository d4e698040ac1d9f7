package chunk_test

import (
	"context"
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
		c, ok, err := a.Add(e.Type, e.Data)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			out = append(out, c)
		}
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
