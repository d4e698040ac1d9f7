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

// packWrite writes cs to a new stream with PackChunks (and MergeDeltas)
// while its Batcher is not running yet, as behind a batch being stored,
// then runs the Batcher and flushes. It returns the stored events.
func packWrite(t *testing.T, lg *eventlog.Log, agent, stream string, next int, cs ...chunk.Chunk) []eventlog.Event {
	t.Helper()
	b := lg.NewBatcher(eventlog.BatcherConfig{})
	w := chunk.NewWriter(b, agent, stream, next, lg.MaxPayload(), chunk.MergeDeltas(), chunk.PackChunks())
	for _, c := range cs {
		if err := w.Write(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if _, err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	evs, err := lg.Read(t.Context(), eventlog.Filter{Agent: agent, Stream: stream}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// checkSpans checks that the stored events hold chunks from..from+n-1 in
// order, each once (chunk.Span), and returns n.
func checkSpans(t *testing.T, evs []eventlog.Event, from int) int {
	t.Helper()
	next := from
	for _, e := range evs {
		first, n, ok := chunk.Span(e)
		if !ok || first != next && n > 0 {
			t.Fatalf("event %s (%s) holds chunks %d+%d (ok %v), want from %d", e.ID, e.Type, first, n, ok, next)
		}
		next += n
	}
	return next - from
}

// TestPackChunks: with PackChunks, the chunks written while the record
// before them waits in the Batcher's queue are stored as one packed
// record; every reader gets each chunk back in order with its index: the
// Assembler, the streams projection (chunk count, first and last
// sequence, status, ids), and a view bootstrapped from the stream's ends,
// which equals a replayed one. A record never passes the max payload (a
// full one starts the next), and a chunk over it is split into parts as
// without packing.
func TestPackChunks(t *testing.T) {
	srv := eventlogtest.RunServer(t, eventlogtest.ServerOptions{MaxPayload: 64 << 10})
	lg := eventlogtest.OpenOn(t, srv, eventlog.Config{})
	live := openStreams(t, lg, chunk.StreamsProjection())

	medium := strings.Repeat("m", 20<<10) // three fit a record, four do not
	big := strings.Repeat("long text ", 10<<10)
	written := []chunk.Chunk{
		{Type: chunk.Start, MessageID: "m1", RequestID: "r1"},
		{Type: chunk.StartStep},
		{Type: chunk.TextStart, ID: "t1"},
		{Type: chunk.TextDelta, ID: "t1", Delta: "Hel"},
		{Type: chunk.TextDelta, ID: "t1", Delta: "lo"},
		{Type: chunk.TextEnd, ID: "t1"},
		{Type: chunk.ToolInputStart, ToolCallID: "c1", ToolName: "x"},
		{Type: chunk.ToolInput, ToolCallID: "c1", ToolName: "x", Input: []byte(`{"q":1}`)},
		{Type: chunk.ToolOutput, ToolCallID: "c1", Output: []byte(`"` + medium + `"`)},
		{Type: chunk.ToolOutput, ToolCallID: "c2", Output: []byte(`"` + medium + `"`)},
		{Type: chunk.ToolOutput, ToolCallID: "c3", Output: []byte(`"` + medium + `"`)},
		{Type: chunk.ToolOutput, ToolCallID: "c4", Output: []byte(`"` + medium + `"`)},
		{Type: chunk.TextStart, ID: "t2"},
		{Type: chunk.TextDelta, ID: "t2", Delta: big},
		{Type: chunk.TextEnd, ID: "t2"},
		{Type: chunk.FinishStep},
		{Type: chunk.Finish},
	}
	want := append(append(append([]chunk.Chunk(nil), written[:3]...), chunk.Chunk{Type: chunk.TextDelta, ID: "t1", Delta: "Hello"}), written[5:]...)
	evs := packWrite(t, lg, "a1", "s1", 0, written...)

	if n := checkSpans(t, evs, 0); n != len(want) {
		t.Fatalf("records hold %d chunks, want %d", n, len(want))
	}
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
		if len(e.Data) > int(lg.MaxPayload())-1024 {
			t.Errorf("record %s holds %d bytes, past the max payload", e.ID, len(e.Data))
		}
	}
	// start..c3's output, c4's output and text-start, the split delta's
	// parts, the rest.
	if len(evs) < 4 || types[0] != chunk.EventChunks || types[len(types)-1] != chunk.EventChunks ||
		!strings.Contains(strings.Join(types, " "), chunk.EventPart) || len(evs) > 8 {
		t.Fatalf("stored records %v", types)
	}
	got := readChunks(t, lg, "a1", "s1")
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read %d chunks %+v\nwant %d", len(got), got, len(want))
	}

	last := evs[len(evs)-1].Seq
	if err := live.pr.WaitFor(t.Context(), last); err != nil {
		t.Fatal(err)
	}
	info, err := live.streams.Get("a1", "s1")
	if err != nil || info.Chunks != len(want) || info.FirstSeq != evs[0].Seq || info.LastSeq != last ||
		info.Status != chunk.StatusCompleted || info.RequestID != "r1" || info.MessageID != "m1" {
		t.Fatalf("stream info = %+v, %v", info, err)
	}
	// An error inside a packed record, and a stream still streaming.
	packWrite(t, lg, "a1", "s2", 0, chunk.Chunk{Type: chunk.Start, MessageID: "m2"}, chunk.Chunk{Type: chunk.StartStep},
		chunk.Chunk{Type: chunk.Error, ErrorText: "the model failed"})
	packWrite(t, lg, "a2", "s3", 0, chunk.Chunk{Type: chunk.Start, MessageID: "m3"}, chunk.Chunk{Type: chunk.StartStep})

	lg2 := eventlogtest.OpenOn(t, srv, eventlog.Config{})
	boot := openStreams(t, lg2, chunk.StreamsProjection())
	replay := openStreams(t, lg2, replayed())
	sameViews(t, lg2, boot, replay, "a1", "a2")
	sameViews(t, lg2, boot, live, "a1", "a2")
	if info, err := boot.streams.Get("a1", "s2"); err != nil || info.Status != chunk.StatusError || info.Error != "the model failed" || info.Chunks != 3 {
		t.Fatalf("a1/s2 = %+v, %v", info, err)
	}
	if info, err := boot.streams.Get("a2", "s3"); err != nil || info.Status != chunk.StatusStreaming || info.Chunks != 2 || info.MessageID != "m3" {
		t.Fatalf("a2/s3 = %+v, %v", info, err)
	}
}

// TestPackChunksAfterSent: a chunk written once the record before it was
// taken into a batch starts a record of its own; nothing sent changes. So
// a Writer flushed after every chunk stores one chunk a record.
func TestPackChunksAfterSent(t *testing.T) {
	lg := eventlogtest.OpenOn(t, eventlogtest.RunServer(t, eventlogtest.ServerOptions{}), eventlog.Config{})
	w := chunk.NewWriter(runBatcher(t, lg), "a1", "s1", 0, lg.MaxPayload(), chunk.PackChunks())
	for _, d := range []string{"a", "b", "c"} {
		if err := w.Write(t.Context(), chunk.Chunk{Type: chunk.TextDelta, ID: "t1", Delta: d}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := lg.Read(t.Context(), eventlog.Filter{Agent: "a1", Stream: "s1"}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 || checkSpans(t, evs, 0) != 3 {
		t.Fatalf("stored %d records, want one a chunk", len(evs))
	}
	got := readChunks(t, lg, "a1", "s1")
	if len(got) != 3 || got[0].Delta != "a" || got[1].Delta != "b" || got[2].Delta != "c" {
		t.Fatalf("stored %+v, want the three deltas as they were", got)
	}
}

// TestPackedRecordRecovery: what a recovery sees of a packed record is all
// of it or none of it. A record that was stored is read whole, and the
// stream goes on after its last chunk; one that was not (the process died
// with it queued) is written again from the stored count, chunk for
// chunk, with no chunk twice and no gap.
func TestPackedRecordRecovery(t *testing.T) {
	lg := eventlogtest.OpenOn(t, eventlogtest.RunServer(t, eventlogtest.ServerOptions{}), eventlog.Config{})
	head := []chunk.Chunk{{Type: chunk.Start, MessageID: "m1"}, {Type: chunk.StartStep}, {Type: chunk.ToolInputStart, ToolCallID: "c1", ToolName: "x"}}
	tail := []chunk.Chunk{{Type: chunk.ToolInput, ToolCallID: "c1", ToolName: "x", Input: []byte(`{}`)}, {Type: chunk.FinishStep}, {Type: chunk.Finish}}
	packWrite(t, lg, "a1", "s1", 0, head...)

	// The tail, packed in a record that is never sent: its Batcher never
	// runs, as in a process killed before its next batch.
	lost := chunk.NewWriter(lg.NewBatcher(eventlog.BatcherConfig{}), "a1", "s1", len(head), lg.MaxPayload(), chunk.PackChunks())
	for _, c := range tail {
		if err := lost.Write(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}

	// Recovery reads the stored stream and writes on from its count.
	stored := readChunks(t, lg, "a1", "s1")
	if !reflect.DeepEqual(stored, head) {
		t.Fatalf("stored %+v, want the first record whole", stored)
	}
	evs := packWrite(t, lg, "a1", "s1", len(stored), tail...)
	if n := checkSpans(t, evs, 0); n != len(head)+len(tail) {
		t.Fatalf("records hold %d chunks", n)
	}
	if got := readChunks(t, lg, "a1", "s1"); !reflect.DeepEqual(got, append(append([]chunk.Chunk(nil), head...), tail...)) {
		t.Fatalf("read %+v", got)
	}
	// A recovery after both records were stored goes on after the last.
	if got := readChunks(t, lg, "a1", "s1"); len(got) != 6 {
		t.Fatalf("read %d chunks", len(got))
	}
}

// TestAssemblerPacked: Add reads a packed record of one chunk, and refuses
// one of several (Chunks reads those); a record that does not decode is an
// error.
func TestAssemblerPacked(t *testing.T) {
	var a chunk.Assembler
	if c, ok, err := a.Add(chunk.EventChunks, []byte(`{"i":3,"c":[{"type":"finish"}]}`)); err != nil || !ok || c.Type != chunk.Finish {
		t.Fatalf("Add = %+v, %v, %v", c, ok, err)
	}
	if _, _, err := a.Add(chunk.EventChunks, []byte(`{"i":3,"c":[{"type":"start"},{"type":"finish"}]}`)); err == nil {
		t.Fatal("Add took a record of two chunks")
	}
	cs, err := a.Chunks(chunk.EventChunks, []byte(`{"i":3,"c":[{"type":"start"},{"type":"finish"}]}`))
	if err != nil || len(cs) != 2 || cs[0].Type != chunk.Start || cs[1].Type != chunk.Finish {
		t.Fatalf("Chunks = %+v, %v", cs, err)
	}
	for _, bad := range []string{`{"i":3,"c":[]}`, `not json`, `{"i":-1,"c":[{"type":"start"}]}`, `{"i":0,"c":["x"]}`} {
		if _, err := a.Chunks(chunk.EventChunks, []byte(bad)); err == nil {
			t.Errorf("Chunks(%s) = nil error", bad)
		}
	}
}
