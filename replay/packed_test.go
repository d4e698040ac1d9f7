package replay_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/replay"
)

// writePacked writes cs to agent's stream with chunk.PackChunks in
// records of per chunks each (a Batcher that runs only once a record's
// chunks are queued, so they pack), and waits until the view has them.
func writePacked(t *testing.T, e *env, agent, stream string, per int, cs ...chunk.Chunk) {
	t.Helper()
	var seq eventlog.Seq
	for from := 0; from < len(cs); from += per {
		b := e.lg.NewBatcher(eventlog.BatcherConfig{})
		w := chunk.NewWriter(b, agent, stream, from, e.lg.MaxPayload(), chunk.PackChunks())
		for _, c := range cs[from:min(from+per, len(cs))] {
			if err := w.Write(t.Context(), c); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- b.Run(ctx) }()
		var err error
		seq, err = w.Flush(t.Context())
		cancel()
		<-done
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := e.pr.WaitFor(t.Context(), seq); err != nil {
		t.Fatal(err)
	}
}

// packedScript is a turn of 12 chunks with a chunk split into parts (over
// the env's 64 KiB max payload) in its second record.
func packedScript() []chunk.Chunk {
	big := strings.Repeat("long text ", 10<<10)
	return []chunk.Chunk{
		{Type: chunk.Start, MessageID: "m1", RequestID: "r1"},
		{Type: chunk.StartStep},
		{Type: chunk.TextStart, ID: "t1"},
		{Type: chunk.TextDelta, ID: "t1", Delta: "Hello"},
		{Type: chunk.TextDelta, ID: "t1", Delta: ", world"},
		{Type: chunk.TextEnd, ID: "t1"},
		{Type: chunk.TextStart, ID: "t2"},
		{Type: chunk.TextDelta, ID: "t2", Delta: big},
		{Type: chunk.TextEnd, ID: "t2"},
		{Type: chunk.ToolInput, ToolCallID: "c1", ToolName: "search", Input: json.RawMessage(`{"q":"x"}`)},
		{Type: chunk.FinishStep},
		{Type: chunk.Finish, FinishReason: "stop"},
	}
}

// TestResumeInsidePackedRecord: the chunks of a packed record each get a
// cursor of their own ("<seq>.<k>", the record's last one "<seq>"), and
// resuming after any chunk's cursor yields exactly the chunks after it:
// no gap, no duplicate, with the Go client and over SSE (after= and
// Last-Event-ID). A cursor naming a record's last chunk inside it
// ("<seq>.<last>") reads as the plain one.
func TestResumeInsidePackedRecord(t *testing.T) {
	e := newEnv(t)
	want := packedScript()
	writePacked(t, e, "c1", "s1", 6, want...)

	c := replay.NewClient(e.lg)
	all := collect(t, c.Follow(t.Context(), "c1", "s1", replay.Cursor{}))
	if len(all) != len(want) {
		t.Fatalf("followed %d chunks, want %d", len(all), len(want))
	}
	inside := 0
	for i, it := range all {
		if sameJSON(it.Chunk, want[i]) != "" {
			t.Fatalf("chunk %d = %+v, want %+v", i, it.Chunk, want[i])
		}
		if i > 0 && it.Cursor.Compare(all[i-1].Cursor) <= 0 {
			t.Fatalf("cursor %d %v not after %v", i, it.Cursor, all[i-1].Cursor)
		}
		if _, ok := it.Cursor.Inside(); ok {
			inside++
		}
	}
	if inside < 8 {
		t.Fatalf("%d cursors inside a record: the stream was not packed", inside)
	}
	for i := -1; i < len(all); i++ {
		from := replay.Cursor{}
		if i >= 0 {
			// As a client sends it back.
			var err error
			if from, err = replay.ParseCursor(all[i].Cursor.String()); err != nil {
				t.Fatal(err)
			}
		}
		got := collect(t, c.Follow(t.Context(), "c1", "s1", from))
		rest := all[i+1:]
		if len(got) != len(rest) {
			t.Fatalf("after %v: %d chunks, want %d", from, len(got), len(rest))
		}
		for k := range got {
			if got[k].Cursor != rest[k].Cursor || sameJSON(got[k].Chunk, rest[k].Chunk) != "" {
				t.Fatalf("after %v: chunk %d at %v, want at %v", from, k, got[k].Cursor, rest[k].Cursor)
			}
		}
	}
	// The first record's last chunk, named inside it, is the plain cursor.
	if k, ok := all[4].Cursor.Inside(); !ok || k != 4 || all[5].Cursor != replay.CursorAt(all[4].Cursor.Seq()) {
		t.Fatalf("cursors of the first record: %v, %v", all[4].Cursor, all[5].Cursor)
	}
	got := collect(t, c.Follow(t.Context(), "c1", "s1", replay.CursorIn(all[5].Cursor.Seq(), 5)))
	if len(got) != len(all)-6 || got[0].Cursor != all[6].Cursor {
		t.Fatalf("after the first record's last chunk named inside it: %d chunks", len(got))
	}

	// SSE: every event's id resumes after it.
	full := readAllSSE(t, e, "/v1/chat/c1/stream?after=0")
	if len(full) != len(all)+1 || full[len(full)-1].Data != "[DONE]" {
		t.Fatalf("SSE replay: %d events", len(full))
	}
	for i, ev := range full[:len(full)-1] {
		if ev.ID != all[i].Cursor.String() {
			t.Fatalf("SSE event %d id %q, want %q", i, ev.ID, all[i].Cursor.String())
		}
		var rest []sseEvent
		if i%2 == 0 {
			rest = readAllSSE(t, e, "/v1/chat/c1/stream?after="+url.QueryEscape(ev.ID))
		} else {
			rest = readAllSSE(t, e, "/v1/chat/c1/stream?after=0", "Last-Event-ID", ev.ID)
		}
		if len(rest) != len(full)-i-1 {
			t.Fatalf("SSE after %s: %d events, want %d", ev.ID, len(rest), len(full)-i-1)
		}
		for k := range rest {
			if rest[k] != full[i+1+k] {
				t.Fatalf("SSE after %s: event %d = %+v, want %+v", ev.ID, k, rest[k], full[i+1+k])
			}
		}
	}
}

// readAllSSE reads a whole SSE response.
func readAllSSE(t *testing.T, e *env, path string, hdr ...string) []sseEvent {
	t.Helper()
	r := newSSE(t, get(t, e, path, hdr...))
	var out []sseEvent
	for {
		ev, ok := r.next()
		if !ok {
			return out
		}
		out = append(out, ev)
	}
}

// sameJSON returns "" when a and b encode alike, else a's encoding.
func sameJSON(a, b chunk.Chunk) string {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) == string(jb) {
		return ""
	}
	return string(ja)
}
