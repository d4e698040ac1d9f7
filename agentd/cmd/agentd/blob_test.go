package main

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/agentd/demo"
	"github.com/forever-agents/forever/blob"
	"github.com/forever-agents/forever/chat"
)

// blobAgent is the agent of the large tool output in TestBinaryVerify.
const blobAgent = "blob"

// blobBytes is the size the blob tool is asked for: the 50 MB
// (52428800) without -race, where it completes in about 11 s (measured by
// hand too: `agentd chat blob '/tool blob {"bytes": 52428800}'`, then GET
// /messages in 2.5 s and `agentd verify` in 2.7 s). Under -race the JSON of
// the output is read about 25 times slower: 4 MiB adds about 2 s to
// TestBinaryVerify (26.6 s without the blob turn), 16 MiB about 38 s.
func blobBytes() int {
	if raceEnabled {
		return 4 << 20
	}
	return 50 << 20
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

// checkBlobTurn checks the blob agent's turn, ended: the model saw the
// whole output (the local model quotes a large one by size and SHA-256),
// GET /messages returns it whole, and the messages verb, whose reply is one
// NATS message, returns its reference ({digest, size}) instead.
func checkBlobTurn(t *testing.T, c *crashClient, p *agentdProc, httpAddr string, reply chathost.Reply) {
	t.Helper()
	if cs := waitTerminal(t, c, p, blobAgent, reply.StreamID); cs[len(cs)-1].Type != "finish" {
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
	code, body := agentdtest.Get(t, "http://"+httpAddr+"/v1/chat/"+blobAgent+"/messages")
	var page struct{ Messages []chat.Message }
	if err := json.Unmarshal([]byte(body), &page); code != 200 || err != nil {
		t.Fatalf("GET messages: %d, %v", code, err)
	}
	if part := toolPart("GET messages", page.Messages); string(part.Output) != string(out) || part.Blobs != nil {
		t.Fatalf("GET messages: blob output of %d bytes (blobs %+v), want %d bytes", len(part.Output), part.Blobs, len(out))
	}
	page.Messages = nil
	json.Unmarshal(c.command(blobAgent, "messages", nil), &page)
	part := toolPart("messages verb", page.Messages)
	if ref := blob.RefOf(out); len(part.Output) != 0 || part.Blobs == nil || part.Blobs.Output == nil || *part.Blobs.Output != ref {
		t.Fatalf("messages verb: blob output of %d bytes, blobs %+v; want the reference %+v", len(part.Output), part.Blobs, ref)
	}
}
