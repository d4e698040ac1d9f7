package chat_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/forever-agents/forever/blob"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/replay"
)

// bigOutput is the size of the big tool's output: over the blob
// threshold (256 KiB), and over one event (the test server's max payload,
// 1 MiB), so that inline it is split into parts. Every byte of it is
// encoded, stored and read back several times a turn, slowly under -race:
// 3 MiB made each of these tests take half a minute in CI.
const bigOutput = 5 << 18 // 1.25 MiB

// bigTools is a tool "big" that returns size bytes of text (its output's
// JSON is out).
func bigTools(t *testing.T, size int) (*chat.Tools, []byte) {
	t.Helper()
	text := strings.Repeat("0123456789abcdef", size/16)
	big, err := chat.NewTool("big", "Returns a lot.", func(context.Context, struct{}) (string, error) {
		return text, nil
	}, chat.WithSafety(chat.Idempotent), chat.WithMaxOutput(4<<20))
	if err != nil {
		t.Fatal(err)
	}
	tools, err := chat.NewTools(big)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(text)
	return tools, out
}

// storedChunks returns the chunk events of agent's stream as stored.
func storedChunks(t *testing.T, lg *eventlog.Log, agent, stream string) []eventlog.Event {
	t.Helper()
	evs, err := lg.Read(t.Context(), eventlog.Filter{Agent: agent, Stream: stream}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// A tool output over the blob threshold is stored once by reference, and
// the chunks stream holds only that reference (a claim check): no chunk
// event carries the bytes, none is split. A turn recovered after a crash
// between the output's chunk and the next model call reads the reference
// back (the model is given the whole output), and replay.Client with
// WithBlobs yields the output chunk as written, every chunk once, in
// order, from any cursor; without WithBlobs it yields the reference.
func TestChunksHoldReferences(t *testing.T) {
	e := newEnv(t)
	bs := openBlobs(t, e)
	tools, out := bigTools(t, bigOutput)
	ref := blob.RefOf(out)
	opt := func(c *chat.Config) { c.Tools, c.Blobs = tools, bs }
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), opt)
	reached := make(chan struct{}, 1)
	chat.StopAt(h.a, func(ctx context.Context, point string) error {
		if point != "step-done" {
			return nil
		}
		reached <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: "/tool big {}"})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, reached)
	h.r.Close()

	recoverHost(t, e, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), opt)
	if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnCompleted {
		t.Fatalf("turn = %s %q", tr.Status, tr.Error)
	}
	msgs := settled(t, e, "a1")
	if len(msgs) != 2 {
		t.Fatalf("%d messages", len(msgs))
	}
	if want := fmt.Sprintf("%d bytes of sha256 %x", len(out), sha256.Sum256(out)); !strings.Contains(msgs[1].Text(), want) {
		t.Fatalf("the recovered turn's answer %q does not say %q: the model was not given the output", msgs[1].Text(), want)
	}

	evs := storedChunks(t, e.lg, "a1", turn.StreamID)
	outputs := 0
	var asm chunk.Assembler
	for _, ev := range evs {
		if len(ev.Data) > 64<<10 || ev.Type == chunk.EventPart {
			t.Fatalf("chunk %s (%s) of %d bytes on the chunks stream", ev.ID, ev.Type, len(ev.Data))
		}
		cs, err := asm.Chunks(ev.Type, ev.Data) // one, or a packed record's
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.Type == chunk.ToolOutput {
				outputs++
				if len(c.Output) != 0 || c.Blobs.Ref("output") == nil || *c.Blobs.Output != ref {
					t.Fatalf("output chunk %s, want only the reference %+v", ev.Data, ref)
				}
			}
		}
	}
	if outputs != 1 {
		t.Fatalf("%d output chunks, want 1", outputs)
	}
	if stored, err := bs.List(t.Context()); err != nil || len(stored) != 1 || stored[0] != ref {
		t.Fatalf("blob store holds %+v (%v), want the output once", stored, err)
	}
	checkVerifyBlobs(t, e.lg, bs)

	// Replay: every chunk once and in order, the output resolved; from
	// each cursor, exactly the chunks after it.
	follow := func(c *replay.Client, after replay.Cursor) []replay.Item {
		t.Helper()
		var items []replay.Item
		for it, err := range c.Follow(t.Context(), "a1", turn.StreamID, after) {
			if err != nil {
				t.Fatal(err)
			}
			items = append(items, it)
		}
		return items
	}
	withBlobs := replay.NewClient(e.lg, replay.WithBlobs(bs))
	all := follow(withBlobs, replay.Cursor{})
	if len(all) != len(evs) {
		t.Fatalf("replay yields %d chunks, %d stored", len(all), len(evs))
	}
	for i, it := range all {
		if it.Cursor != replay.CursorAt(evs[i].Seq) {
			t.Fatalf("item %d at cursor %d, want %d", i, it.Cursor, evs[i].Seq)
		}
		if it.Chunk.Blobs != nil {
			t.Fatalf("item %d still holds %+v", i, it.Chunk.Blobs)
		}
		if it.Chunk.Type == chunk.ToolOutput && string(it.Chunk.Output) != string(out) {
			t.Fatalf("replayed output of %d bytes, want %d", len(it.Chunk.Output), len(out))
		}
		rest := follow(withBlobs, it.Cursor)
		if len(rest) != len(all)-i-1 || (len(rest) > 0 && rest[0].Cursor != all[i+1].Cursor) {
			t.Fatalf("after cursor %d: %d chunks, want %d", it.Cursor, len(rest), len(all)-i-1)
		}
	}
	for _, it := range follow(replay.NewClient(e.lg), replay.Cursor{}) {
		if it.Chunk.Type == chunk.ToolOutput && (len(it.Chunk.Output) != 0 || it.Chunk.Blobs.Ref("output") == nil) {
			t.Fatalf("without blobs: output chunk %+v, want the reference", it.Chunk)
		}
	}

	// An object that is gone is an error of that chunk's item; the
	// follow goes on to the end.
	if err := bs.Delete(t.Context(), ref); err != nil {
		t.Fatal(err)
	}
	var missing, items int
	for it, err := range withBlobs.Follow(t.Context(), "a1", turn.StreamID, replay.Cursor{}) {
		if errors.Is(err, blob.ErrNotFound) {
			missing++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		items++
		if it.Chunk.Type == chunk.ToolOutput {
			t.Fatalf("output chunk yielded without its payload")
		}
	}
	if missing != 1 || items != len(evs)-1 {
		t.Fatalf("%d missing, %d items; want 1, %d", missing, items, len(evs)-1)
	}
}

// Until the cluster's record format lets chunks hold references
// (Config.ChunkRefsWritable false: a node of an earlier release still
// runs), a tool output's chunk carries the output inline, split into
// parts, while the events hold the reference; once it does, the next
// turn's chunk holds the reference.
func TestChunkRefsWaitForFormat(t *testing.T) {
	e := newEnv(t)
	bs := openBlobs(t, e)
	tools, out := bigTools(t, bigOutput)
	var writable atomic.Bool
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), func(c *chat.Config) {
		c.Tools, c.Blobs = tools, bs
		c.ChunkRefsWritable = func() bool { return writable.Load() }
	})
	outputOf := func(stream string) (chunk.Chunk, int) {
		t.Helper()
		var a chunk.Assembler
		parts := 0
		for _, ev := range storedChunks(t, e.lg, "a1", stream) {
			if ev.Type == chunk.EventPart {
				parts++
			}
			cs, err := a.Chunks(ev.Type, ev.Data)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cs {
				if c.Type == chunk.ToolOutput {
					return c, parts
				}
			}
		}
		t.Fatal("no output chunk")
		return chunk.Chunk{}, 0
	}
	turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: "/tool big {}"})
	if err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	if c, parts := outputOf(turn.StreamID); string(c.Output) != string(out) || c.Blobs != nil || parts == 0 {
		t.Fatalf("format not raised: output chunk of %d bytes in %d parts, blobs %+v; want the output inline", len(c.Output), parts, c.Blobs)
	}
	writable.Store(true)
	turn, err = h.a.Send(t.Context(), chat.SendRequest{Text: "/tool big {}"})
	if err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	if c, parts := outputOf(turn.StreamID); len(c.Output) != 0 || c.Blobs.Ref("output") == nil || parts != 0 {
		t.Fatalf("format raised: output chunk of %d bytes in %d parts, blobs %+v; want the reference", len(c.Output), parts, c.Blobs)
	}
}
