package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/forever-agents/forever/replay"
)

// streamChunks reads one chat stream's chunks from the log.
func (c *crashClient) streamChunks(agent, stream string) []chunk.Chunk {
	return c.streamChunksBefore(agent, stream, time.Time{})
}

// streamChunksBefore reads the chunks stored before t (all when t is zero).
func (c *crashClient) streamChunksBefore(agent, stream string, t time.Time) []chunk.Chunk {
	c.t.Helper()
	var evs []eventlog.Event
	var err error
	for range 100 { // the server may be restarting, or electing a leader
		if evs, err = c.lg.Read(c.t.Context(), eventlog.Filter{Agent: agent, Stream: stream}, 0, 0); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond) // not a synchronisation: a retry's backoff
	}
	if err != nil {
		c.t.Fatal(err)
	}
	var a chunk.Assembler
	var out []chunk.Chunk
	for _, e := range evs {
		if !t.IsZero() && !e.Time.Before(t) {
			break
		}
		chs, err := a.Chunks(e.Type, e.Data) // a packed record holds several
		if err != nil {
			c.t.Fatal(err)
		}
		out = append(out, chs...)
	}
	return out
}

func textOf(chunks []chunk.Chunk) string {
	var b strings.Builder
	for _, ch := range chunks {
		if ch.Type == chunk.TextDelta {
			b.WriteString(ch.Delta)
		}
	}
	return b.String()
}

// testBinaryChatCrash: agentd answers a chat sent on forever.cmd.<agent>.chat
// with the local model at a slow rate, is SIGKILLed mid-stream and restarted;
// the turn is recovered and completes, and the history holds the user message
// and one assistant message whose text is the partial followed by the
// continuation.
func testBinaryChatCrash(t *testing.T, bin string) {
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	start := func() *agentdProc {
		p := &agentdProc{out: &agentdtest.SyncBuffer{}, exited: make(chan error, 1)}
		p.cmd = exec.Command(bin, "--data", data, "--http", httpAddr, "--nats-listen", natsAddr, "--log-format", "json", "--local-rate", "40")
		p.cmd.Env = os.Environ()
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
		return p
	}
	p := startWith(t, start(), httpAddr)
	c := dialAgentd(t, natsAddr)
	const agent, prompt = "demo", "Tell me a story about a lighthouse."
	var reply chathost.Reply
	json.Unmarshal(c.command(agent, "chat", map[string]string{"text": prompt}), &reply)
	if reply.StreamID == "" || reply.RequestID == "" {
		t.Fatalf("chat reply %+v", reply)
	}
	// A reader follows the stream through the crash: each time the follow
	// fails it resumes from its last cursor. It must see every chunk once,
	// in order.
	followed := make(chan []replay.Item, 1)
	go func() { followed <- followAcrossRestarts(t, c, agent, reply.StreamID) }()
	// Another agent's turn with 5 messages queued behind it (enqueue):
	// after the kill, all 5 are answered once, in order.
	queued := queueBeforeKill(t, c, "queue", 5)

	// Kill once the stream holds a good part of the answer.
	waitfor.True(t, "the stream to grow to 25 chunks", func() bool { return len(c.streamChunks(agent, reply.StreamID)) >= 25 })
	p.kill()
	killedAt := time.Now()

	p = startWith(t, start(), httpAddr)
	chunks := waitTerminalFor(t, c, p, agent, reply.StreamID, 60*time.Second)
	if last := chunks[len(chunks)-1]; last.Type != chunk.Finish {
		t.Fatalf("stream ended with %+v, want finish", last)
	}
	starts := 0
	for _, ch := range chunks {
		if ch.Type == chunk.Start {
			starts++
		}
	}
	if starts != 1 {
		t.Errorf("stream has %d start chunks, want 1", starts)
	}
	partial := textOf(c.streamChunksBefore(agent, reply.StreamID, killedAt))
	if partial == "" {
		t.Fatal("nothing streamed before the kill")
	}
	full := textOf(chunks)
	t.Logf("partial before the kill: %d of %d bytes, %d chunks in the stream", len(partial), len(full), len(chunks))
	want := llm.NewLocal(llm.LocalConfig{}).Answer(llm.Request{Messages: []llm.Message{llm.Text(llm.RoleUser, prompt)}})
	if !strings.HasPrefix(full, partial) || full != want {
		t.Errorf("streamed text is not partial + continuation of the answer:\npartial %q\nfull    %q\nwant    %q", partial, full, want)
	}

	var page struct{ Messages []chat.Message }
	json.Unmarshal(c.command(agent, "messages", nil), &page)
	if len(page.Messages) != 2 || page.Messages[0].Role != "user" || page.Messages[1].Role != "assistant" {
		t.Fatalf("history = %+v, want the user message and one assistant message", page.Messages)
	}
	var text strings.Builder
	for _, part := range page.Messages[1].Parts {
		text.WriteString(part.Text)
	}
	if text.String() != want {
		t.Errorf("assistant message %q, want %q", text.String(), want)
	}
	select {
	case items := <-followed:
		if len(items) != len(chunks) {
			t.Errorf("the reader saw %d chunks across the restart, the stream has %d", len(items), len(chunks))
		}
		for i := range min(len(items), len(chunks)) {
			if !sameChunk(items[i].Chunk, chunks[i]) {
				t.Errorf("reader chunk %d = %+v, stream has %+v", i, items[i].Chunk, chunks[i])
				break
			}
			if i > 0 && items[i].Cursor.Compare(items[i-1].Cursor) <= 0 {
				t.Errorf("reader cursors not increasing at %d: %v after %v", i, items[i].Cursor, items[i-1].Cursor)
				break
			}
		}
	case <-time.After(30 * time.Second):
		t.Error("the reader did not reach the end of the stream")
	}
	checkQueueAfterKill(t, c, "queue", queued)
	verifyLog(t, c)
	if t.Failed() {
		t.Logf("agentd output:\n%s", p.out.String())
	}
}

func sameChunk(a, b chunk.Chunk) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// followAcrossRestarts follows a stream with the replay client until its
// terminal chunk, resuming from the last cursor whenever the follow fails
// (the server died under it).
func followAcrossRestarts(t *testing.T, c *crashClient, agent, stream string) []replay.Item {
	client := replay.NewClient(c.lg)
	var items []replay.Item
	var after replay.Cursor
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		for it, err := range client.Follow(ctx, agent, stream, after) {
			if err != nil {
				break
			}
			items = append(items, it)
			after = it.Cursor
			if it.Chunk.Terminal() {
				cancel()
				return items
			}
		}
		cancel()
		time.Sleep(50 * time.Millisecond) // not a synchronisation: a reconnect's backoff
	}
	return items
}
