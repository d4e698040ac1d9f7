package main

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/agentd/demo"
	"github.com/forever-agents/forever/blob"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/waitfor"
)

// blobAgent is the agent of the large tool output in TestBinaryVerify.
const blobAgent = "blob"

// blobBytes is the size the blob tool is asked for: the 50 MB
// (52428800) without -race; under -race 4 MiB unless
// FOREVER_TEST_BLOB_BYTES says otherwise (52428800 runs the size
// there too, with a longer wait than waitTerminal's). Measured by hand on
// 2 busy shared cores (load ~18), `agentd chat blob '/tool blob {"bytes":
// 52428800}'` then GET /messages, GET /stream?after=0 and `agentd verify`:
// without -race 9.3 s, 2.6 s, 2.6 s, 1.7 s (FOREVER_CHUNKS 24 KB; before
// chunks held references 15.8 s, 2.2 s, 2.9 s, 5.6 s and 70 MB); with
// -race 95 s for the turn alone (the output's JSON and digest are read
// byte by byte under the race detector), too slow for CI.
func blobBytes() int {
	if s := os.Getenv("FOREVER_TEST_BLOB_BYTES"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n
		}
	}
	if raceEnabled {
		return 4 << 20
	}
	return 50 << 20
}

// blobWait bounds the waits for the blob turn: a minute, and under -race
// 3 s more per MiB (the 50 MB turn alone took 95 s there).
func blobWait() time.Duration {
	if !raceEnabled {
		return time.Minute
	}
	return time.Minute + time.Duration(blobBytes()>>20)*3*time.Second
}

// startBlobTurn asks the blob agent's local model to call the blob tool.
func startBlobTurn(t *testing.T, c *crashClient) chathost.Reply {
	t.Helper()
	var reply chathost.Reply
	json.Unmarshal(c.command(blobAgent, "chat", map[string]string{"text": fmt.Sprintf(`/tool blob {"bytes": %d}`, blobBytes())}), &reply)
	if reply.StreamID == "" {
		t.Fatalf("chat reply %+v", reply)
	}
	return reply
}

// waitBlobCall waits until the blob turn's stream holds the call's
// complete input (tool-input-available): the tool runs from then on.
func waitBlobCall(t *testing.T, c *crashClient, p *agentdProc, reply chathost.Reply) {
	t.Helper()
	waitfor.Within(t, blobWait(), func() error {
		for _, ch := range c.streamChunks(blobAgent, reply.StreamID) {
			if ch.Type == chunk.ToolInput {
				return nil
			}
		}
		return fmt.Errorf("the blob call's input to be stored:\n%s", p.out.String())
	})
}

// checkBlobTurn checks the blob agent's turn, ended: the model saw the
// whole output (the local model quotes a large one by size and SHA-256),
// GET /messages returns it whole, and the messages verb, whose reply is one
// NATS message, returns its reference ({digest, size}) instead.
func checkBlobTurn(t *testing.T, c *crashClient, p *agentdProc, httpAddr string, reply chathost.Reply) {
	t.Helper()
	if cs := waitTerminalFor(t, c, p, blobAgent, reply.StreamID, blobWait()); cs[len(cs)-1].Type != "finish" {
		t.Fatalf("blob turn's stream ends with %+v", cs[len(cs)-1])
	}
	want, err := demo.Blob(demo.BlobInput{Bytes: blobBytes()})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(want)
	quote := fmt.Sprintf("%d bytes of sha256 %x", len(out), sha256.Sum256(out))
	toolPart := func(what string, msgs []chat.Message) chat.Part {
		t.Helper()
		if len(msgs) != 2 || msgs[1].ID != reply.MessageID {
			t.Fatalf("%s: %d messages, want the user's and the answer %s", what, len(msgs), reply.MessageID)
		}
		if !strings.Contains(msgs[1].Text(), quote) {
			t.Fatalf("%s: the answer %q does not quote %q", what, msgs[1].Text(), quote)
		}
		for _, part := range msgs[1].Parts {
			if part.Type == chat.PartTool && part.ToolName == demo.ToolBlob {
				if part.State != chat.ToolOutput {
					t.Fatalf("%s: blob call %s %q", what, part.State, part.ErrorText)
				}
				return part
			}
		}
		t.Fatalf("%s: no blob call in %+v", what, msgs[1].Parts)
		return chat.Part{}
	}
	var page struct{ Messages []chat.Message }
	// The answer is appended after the finish chunk: GET waits for it
	// 10 s, which a 50 MB turn under -race outlasts.
	waitfor.Within(t, blobWait(), func() error {
		code, body := agentdtest.Get(t, "http://"+httpAddr+"/v1/chat/"+blobAgent+"/messages")
		if err := json.Unmarshal([]byte(body), &page); code != 200 || err != nil {
			t.Fatalf("GET messages: %d, %v", code, err)
		}
		if len(page.Messages) != 2 {
			return fmt.Errorf("the answer in GET messages: %d messages", len(page.Messages))
		}
		return nil
	})
	if part := toolPart("GET messages", page.Messages); string(part.Output) != string(out) || part.Blobs != nil {
		t.Fatalf("GET messages: blob output of %d bytes (blobs %+v), want %d bytes", len(part.Output), part.Blobs, len(out))
	}
	page.Messages = nil
	json.Unmarshal(c.command(blobAgent, "messages", nil), &page)
	part := toolPart("messages verb", page.Messages)
	if ref := blob.RefOf(out); len(part.Output) != 0 || part.Blobs == nil || part.Blobs.Output == nil || *part.Blobs.Output != ref {
		t.Fatalf("messages verb: blob output of %d bytes, blobs %+v; want the reference %+v", len(part.Output), part.Blobs, ref)
	}
	checkBlobStream(t, c, httpAddr, reply, out)
}

// checkBlobStream checks the blob turn's chunks: FOREVER_CHUNKS holds the
// output's reference only (no chunk event over 64 KiB, none split), and
// the gateway's replay of the stream (GET /v1/chat/{id}/stream?after=0,
// as an AI SDK client resumes) carries the whole output.
func checkBlobStream(t *testing.T, c *crashClient, httpAddr string, reply chathost.Reply, out []byte) {
	t.Helper()
	evs, err := c.lg.Read(t.Context(), eventlog.Filter{Agent: blobAgent, Stream: reply.StreamID}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if len(e.Data) > 64<<10 || e.Type == chunk.EventPart {
			t.Fatalf("the chunks stream holds %s (%s) of %d bytes", e.ID, e.Type, len(e.Data))
		}
	}
	code, body := agentdtest.Get(t, "http://"+httpAddr+"/v1/chat/"+blobAgent+"/stream?after=0")
	want := `"type":"tool-output-available","toolCallId":`
	i := strings.Index(body, want)
	if code != 200 || i < 0 {
		t.Fatalf("GET stream?after=0: %d, %d bytes, no output chunk", code, len(body))
	}
	line, _, _ := strings.Cut(body[i:], "\n")
	if !strings.HasSuffix(line, `"output":`+string(out)+`}`) || strings.Contains(body, `"blobs"`) {
		t.Fatalf("GET stream?after=0: the output chunk has %d bytes, want the output's %d and no reference", len(line), len(out))
	}
}
