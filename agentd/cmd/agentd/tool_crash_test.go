package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/agentd/demo"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/forever-agents/forever/replay"
)

// toolPrompt makes the local model call clock, then note, then answer
// quoting both: three steps, the tools slow enough to be killed in.
const toolPrompt = "/tool clock {\"delayMs\":1500}\n/tool note {\"text\":\"hello\",\"delayMs\":1500}"

// testBinaryToolCrash: agentd runs a three-step turn with the built-in
// clock (idempotent) and note (unsafe) tools and is SIGKILLed at a crash
// point of a step, then restarted. Each time: the turn completes with one
// assistant message holding every step; the note was written at most once
// (its own file is the side-effect record) and, when cut off, not written
// again, the model being told; a reader following from the start across
// the restart sees every chunk once, in order.
func testBinaryToolCrash(t *testing.T, bin string) {
	cases := []struct {
		name string
		// at reports, from the stream so far, whether to kill now.
		at func(cs []chunk.Chunk) bool
		// noteCut: the note was running when killed.
		noteCut bool
	}{
		{name: "while the idempotent clock runs", at: func(cs []chunk.Chunk) bool {
			return hasChunk(cs, chunk.ToolInput, "clock") && !hasOutput(cs, 0)
		}},
		{name: "while the unsafe note runs", noteCut: true, at: func(cs []chunk.Chunk) bool {
			return hasChunk(cs, chunk.ToolInput, "note") && !hasOutput(cs, 1)
		}},
		{name: "while the model streams the answer", at: func(cs []chunk.Chunk) bool {
			return countChunks(cs, chunk.StartStep) == 3 && len(textOf(cs)) > 20
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
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
			const agent = "tools"
			var reply chathost.Reply
			json.Unmarshal(c.command(agent, "chat", map[string]string{"text": toolPrompt}), &reply)
			if reply.StreamID == "" {
				t.Fatalf("chat reply %+v", reply)
			}
			followed := make(chan []replay.Item, 1)
			go func() { followed <- followAcrossRestarts(t, c, agent, reply.StreamID) }()

			waitfor.True(t, "the crash point", func() bool { return tc.at(c.streamChunks(agent, reply.StreamID)) })
			// The tool's op.started lands right after its input chunk:
			// let it, well within the tool's delay.
			time.Sleep(300 * time.Millisecond) // not a synchronisation: the kill point, after op.started lands, no observable condition
			p.kill()
			p = startWith(t, start(), httpAddr)

			chunks := waitTerminalFor(t, c, p, agent, reply.StreamID, 60*time.Second)
			if last := chunks[len(chunks)-1]; last.Type != chunk.Finish {
				t.Fatalf("stream ended with %+v, want finish", last)
			}
			var page struct{ Messages []chat.Message }
			json.Unmarshal(c.command(agent, "messages", nil), &page)
			if len(page.Messages) != 2 {
				t.Fatalf("history = %+v, want the user message and one assistant message", page.Messages)
			}
			m := page.Messages[1]
			var calls []chat.Part
			for _, part := range m.Parts {
				if part.Type == chat.PartTool {
					calls = append(calls, part)
				}
			}
			if len(calls) != 2 || calls[0].ToolName != "clock" || calls[1].ToolName != "note" {
				t.Fatalf("tool parts = %+v, want clock then note", calls)
			}
			if calls[0].State != chat.ToolOutput {
				t.Errorf("clock: %s %q", calls[0].State, calls[0].ErrorText)
			}
			notes, _ := os.ReadFile(filepath.Join(data, demo.NotesFile))
			written := strings.Count(string(notes), calls[1].ToolCallID+"\t")
			if tc.noteCut {
				if calls[1].State != chat.ToolOutputError || calls[1].ErrorText != chat.ErrTextMaybeExecuted {
					t.Errorf("note: %s %q, want the maybe-executed error", calls[1].State, calls[1].ErrorText)
				}
				if written != 0 {
					t.Errorf("the note cut off during its delay was written %d times", written)
				}
				if !strings.Contains(m.Text(), "The note tool failed: ") {
					t.Errorf("the model was not told: %q", m.Text())
				}
			} else {
				if calls[1].State != chat.ToolOutput || written != 1 {
					t.Errorf("note: %s, written %d times, want once", calls[1].State, written)
				}
				if !strings.Contains(m.Text(), "The note tool returned: ") {
					t.Errorf("answer %q does not quote the note's output", m.Text())
				}
			}
			inputs, outputs := map[string]int{}, map[string]int{}
			for _, ch := range chunks {
				switch ch.Type {
				case chunk.ToolInput:
					inputs[ch.ToolCallID]++
				case chunk.ToolOutput, chunk.ToolOutputError:
					outputs[ch.ToolCallID]++
				}
			}
			for _, call := range calls {
				if inputs[call.ToolCallID] != 1 || outputs[call.ToolCallID] != 1 {
					t.Errorf("%s: %d input and %d output chunks, want one each", call.ToolName, inputs[call.ToolCallID], outputs[call.ToolCallID])
				}
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
				}
			case <-time.After(30 * time.Second):
				t.Error("the reader did not reach the end of the stream")
			}
			verifyLog(t, c)
			if t.Failed() {
				t.Logf("agentd output:\n%s", p.out.String())
			}
		})
	}
}

func hasChunk(cs []chunk.Chunk, typ, tool string) bool {
	for _, c := range cs {
		if c.Type == typ && c.ToolName == tool {
			return true
		}
	}
	return false
}

// hasOutput reports whether the i-th tool call of the stream has an output.
func hasOutput(cs []chunk.Chunk, i int) bool {
	var ids []string
	out := map[string]bool{}
	for _, c := range cs {
		switch c.Type {
		case chunk.ToolInput:
			ids = append(ids, c.ToolCallID)
		case chunk.ToolOutput, chunk.ToolOutputError:
			out[c.ToolCallID] = true
		}
	}
	return i < len(ids) && out[ids[i]]
}

func countChunks(cs []chunk.Chunk, typ string) int {
	n := 0
	for _, c := range cs {
		if c.Type == typ {
			n++
		}
	}
	return n
}

// testBinaryApproval: a note that needs approval ends its turn waiting
// (tool-approval-request, nothing written). The wait survives an idle
// deactivation and a restart (SIGKILL); the approval then arrives over NATS
// (the approve verb) or over HTTP (an AI SDK body whose last message is the
// assistant's, its tool part approval-responded), and the note is written
// once. A second approval is a 409.
func testBinaryApproval(t *testing.T, bin string) {
	for _, via := range []string{"NATS", "HTTP"} {
		t.Run(via, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
			start := func() *agentdProc {
				p := &agentdProc{out: &agentdtest.SyncBuffer{}, exited: make(chan error, 1)}
				p.cmd = exec.Command(bin, "--data", data, "--http", httpAddr, "--nats-listen", natsAddr,
					"--log-format", "json", "--local-rate", "200", "--idle-timeout", "200ms")
				p.cmd.Env = os.Environ()
				p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
				return p
			}
			p := startWith(t, start(), httpAddr)
			c := dialAgentd(t, natsAddr)
			const agent = "approvals"
			var reply chathost.Reply
			json.Unmarshal(c.command(agent, "chat", map[string]string{"text": "/tool note {\"text\":\"please approve me\"}"}), &reply)
			chunks := waitTerminal(t, c, p, agent, reply.StreamID)
			if last := chunks[len(chunks)-1]; last.Type != chunk.Finish || last.FinishReason != "tool-calls" {
				t.Fatalf("waiting turn ended with %+v", last)
			}
			var page struct{ Messages []chat.Message }
			json.Unmarshal(c.command(agent, "messages", nil), &page)
			if len(page.Messages) != 2 {
				t.Fatalf("history = %+v", page.Messages)
			}
			waiting := page.Messages[1]
			var call chat.Part
			for _, part := range waiting.Parts {
				if part.Type == chat.PartTool {
					call = part
				}
			}
			if call.State != chat.ToolApprovalRequested || call.Approval == nil {
				t.Fatalf("call = %+v, want approval-requested", call)
			}
			waitfor.True(t, "the waiting agent to be deactivated", func() bool {
				var st host.Status
				json.Unmarshal(c.command(agent, "status", nil), &st)
				return !st.Active
			})
			p.kill()
			p = startWith(t, start(), httpAddr)
			// agentd status lists the call that waits, after the restart too.
			if out := runAgentdCLI(t, bin, "status", agent, "--server", "nats://"+natsAddr); !strings.Contains(out, " "+call.ToolCallID+" note ") {
				t.Errorf("agentd status does not list the pending approval %s:\n%s", call.ToolCallID, out)
			}

			var stream string
			switch via {
			case "NATS":
				json.Unmarshal(c.command(agent, "approve", map[string]any{"approvalId": call.Approval.ID, "approved": true}), &reply)
				stream = reply.StreamID
			case "HTTP":
				yes := true
				for i, part := range waiting.Parts {
					if part.ToolCallID == call.ToolCallID {
						waiting.Parts[i].State = chat.ToolApprovalResponded
						waiting.Parts[i].Approval = &chat.ToolApproval{ID: call.Approval.ID, Approved: &yes}
					}
				}
				body, _ := json.Marshal(map[string]any{"id": agent, "messages": []chat.Message{page.Messages[0], waiting}})
				resp := agentdtest.Post(t, t.Context(), "http://"+httpAddr+"/v1/chat", string(body))
				sse, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || !strings.Contains(string(sse), `"tool-output-available"`) {
					t.Fatalf("POST /v1/chat with the approval: %d\n%s", resp.StatusCode, sse)
				}
			}
			if stream != "" {
				chunks = waitTerminal(t, c, p, agent, stream)
				if last := chunks[len(chunks)-1]; last.Type != chunk.Finish {
					t.Fatalf("resumed turn ended with %+v", last)
				}
			}
			waitfor.NoError(t, func() error {
				json.Unmarshal(c.command(agent, "messages", nil), &page)
				if m := page.Messages[len(page.Messages)-1]; !strings.Contains(m.Text(), "The note tool returned") {
					return fmt.Errorf("the approved note's answer: %+v\n%s", page.Messages, p.out.String())
				}
				return nil
			})
			if len(page.Messages) != 2 {
				t.Errorf("history has %d messages, want the user's and one assistant message", len(page.Messages))
			}
			notes, _ := os.ReadFile(filepath.Join(data, demo.NotesFile))
			if n := strings.Count(string(notes), call.ToolCallID+"\t"); n != 1 {
				t.Errorf("the approved note was written %d times, want once", n)
			}
			msg, err := c.nc.Request("forever.cmd."+agent+".approve", []byte(`{"toolCallId":"`+call.ToolCallID+`","approved":true}`), 10*time.Second)
			if err != nil || msg.Header.Get("Nats-Service-Error-Code") != "409" {
				t.Errorf("a second approval = %v %v %s, want 409", err, msg.Header, msg.Data)
			}
			// agentd replay runs both turns (the call, then its approval)
			// through this binary's code with the recorded outputs: the
			// same, and the note is not written again.
			if out := runAgentdCLI(t, bin, "replay", agent, "--server", "nats://"+natsAddr); !strings.HasSuffix(out, "2 turns: 2 same, 0 differs, 0 skipped\n") {
				t.Errorf("agentd replay:\n%s", out)
			}
			if again, _ := os.ReadFile(filepath.Join(data, demo.NotesFile)); string(again) != string(notes) {
				t.Errorf("agentd replay wrote a note: %q, was %q", again, notes)
			}
			if t.Failed() {
				t.Logf("agentd output:\n%s", p.out.String())
			}
		})
	}
}

// waitTerminal waits for a stream's terminal chunk and returns its chunks.
func waitTerminal(t *testing.T, c *crashClient, p *agentdProc, agent, stream string) []chunk.Chunk {
	t.Helper()
	return waitTerminalFor(t, c, p, agent, stream, 60*time.Second)
}

// waitTerminalFor is waitTerminal waiting up to d.
func waitTerminalFor(t *testing.T, c *crashClient, p *agentdProc, agent, stream string, d time.Duration) []chunk.Chunk {
	t.Helper()
	var chunks []chunk.Chunk
	waitfor.Within(t, d, func() error {
		chunks = c.streamChunks(agent, stream)
		if n := len(chunks); n > 0 && chunks[n-1].Terminal() {
			return nil
		}
		return fmt.Errorf("stream %s to end:\n%s", stream, p.out.String())
	})
	return chunks
}
