package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm/llmtest"
	"github.com/forever-agents/forever/internal/waitfor"
)

// testBinaryHugeReply: a provider (a local Chat Completions server) answers
// with 2 MiB, more than the server's max payload. The turn completes and
// its answer is stored whole, across message.part events, and read back
// whole over HTTP (it used to fail the turn and keep no message, and
// before that to stay "streaming" so that every later chat got 409). The
// next chat is taken, also after a restart.
func testBinaryHugeReply(t *testing.T, bin string) {
	var calls atomic.Int32
	srv := llmtest.NewServer(t, func(llmtest.Request) llmtest.Reply {
		if calls.Add(1) == 1 {
			piece := strings.Repeat("x", 32<<10)
			deltas := make([]string, 64)
			for i := range deltas {
				deltas[i] = piece
			}
			return llmtest.Stream(llmtest.NewChat("c1", "m").Text(deltas...).Finish("stop").Done().Events())
		}
		return llmtest.Stream(llmtest.NewChat("c2", "m").Text("Hello", " again").Finish("stop").Done().Events())
	})
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	start := func() *agentdProc {
		p := &agentdProc{out: &agentdtest.SyncBuffer{}, exited: make(chan error, 1)}
		p.cmd = exec.Command(bin, "--data", data, "--http", httpAddr, "--nats-listen", natsAddr, "--log-format", "json",
			"--provider", "chatcompletions", "--provider-url", srv.URL+"/v1", "--model", "m")
		p.cmd.Env = os.Environ()
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
		return startWith(t, p, httpAddr)
	}
	p := start()
	c := dialAgentd(t, natsAddr)
	const agent = "big"
	ended := func(stream string) []chunk.Chunk {
		t.Helper()
		var cs []chunk.Chunk
		waitfor.Within(t, 60*time.Second, func() error {
			cs = c.streamChunks(agent, stream)
			if n := len(cs); n > 0 && cs[n-1].Terminal() {
				return nil
			}
			return fmt.Errorf("stream %s not ended:\n%s", stream, p.out.String())
		})
		return cs
	}
	// A turn ends (its status says so) just after its stream's terminal
	// chunk: a kill in between leaves a turn that waits for recovery.
	idle := func() {
		t.Helper()
		waitfor.True(t, "no active turn", func() bool {
			var s chat.Status
			return json.Unmarshal(c.command(agent, "status", nil), &s) == nil && s.ActiveTurn == nil
		})
	}
	var first chathost.Reply
	json.Unmarshal(c.command(agent, "chat", map[string]string{"text": "say a lot"}), &first)
	cs := ended(first.StreamID)
	if last := cs[len(cs)-1]; last.Type != chunk.Finish {
		t.Fatalf("huge answer's stream ends with %+v", last)
	}
	code, body := agentdtest.Get(t, "http://"+httpAddr+"/v1/chat/"+agent+"/messages")
	var page struct{ Messages []chat.Message }
	err := json.Unmarshal([]byte(body), &page)
	msgs := page.Messages
	if code != 200 || err != nil || len(msgs) != 2 ||
		msgs[1].ID != first.MessageID || msgs[1].Text() != strings.Repeat("x", 64*32<<10) {
		t.Fatalf("messages after the huge answer: %d, %d messages (%v), want the user's and the whole 2 MiB answer", code, len(msgs), err)
	}
	// The agent takes the next chat (command fails the test on 409).
	idle()
	var second chathost.Reply
	json.Unmarshal(c.command(agent, "chat", map[string]string{"text": "hello"}), &second)
	if cs := ended(second.StreamID); cs[len(cs)-1].Type != chunk.Finish || textOf(cs) != "Hello again" {
		t.Fatalf("next turn's stream %+v", cs)
	}
	// And after a restart.
	idle()
	p.kill()
	p = start()
	var third chathost.Reply
	json.Unmarshal(c.command(agent, "chat", map[string]string{"text": "once more"}), &third)
	ended(third.StreamID)
	var status chat.Status
	json.Unmarshal(c.command(agent, "status", nil), &status)
	if status.ActiveTurn != nil && status.ActiveTurn.RequestID == first.RequestID {
		t.Fatalf("the huge turn is still active: %+v", status.ActiveTurn)
	}
	if t.Failed() {
		t.Logf("agentd output:\n%s", p.out.String())
	}
}
