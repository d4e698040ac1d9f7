package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/internal/waitfor"
)

// contextTurnText is the user message of turn i of testBinaryContextTokens:
// about 80 tokens, its first word naming the turn.
func contextTurnText(i int) string {
	return fmt.Sprintf("turn%d ", i) + strings.Repeat(fmt.Sprintf("word%d ", i), 50)
}

// testBinaryContextTokens: agentd with --context-tokens 200 and the local
// model, six turns of about 80 tokens each. The conversation outgrows the
// budget: a context.summarized event is stored, its summary (the local
// model's, naming what it covered) begins at the first message, the last
// turn's model call (read in its span, --trace-content, exported on
// stdout) gets the summary and the newest message but not the first, and
// the messages verb still returns all twelve messages.
func testBinaryContextTokens(t *testing.T, bin string) {
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	p := &agentdProc{out: &agentdtest.SyncBuffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(bin, "--data", data, "--http", httpAddr, "--nats-listen", natsAddr, "--log-format", "json",
		"--local-rate", "-1", "--context-tokens", "200", "--trace-content")
	p.cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=console", "OTEL_BSP_SCHEDULE_DELAY=50")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p = startWith(t, p, httpAddr)
	c := dialAgentd(t, natsAddr)

	const agent, turns = "ctx", 6
	for i := range turns {
		var reply chathost.Reply
		json.Unmarshal(c.command(agent, "chat", map[string]string{"text": contextTurnText(i)}), &reply)
		if reply.StreamID == "" {
			t.Fatalf("turn %d: chat reply %+v", i, reply)
		}
		waitStreamEnd(t, c, agent, reply.StreamID)
	}

	var summaries []string
	for _, e := range c.events(agent) {
		if e.Type == "context.summarized" {
			var s struct{ Text string }
			if err := e.Decode(&s); err != nil {
				t.Fatal(err)
			}
			summaries = append(summaries, s.Text)
		}
	}
	if len(summaries) == 0 {
		t.Fatalf("no context.summarized after %d turns past the budget", turns)
	}
	if first := summaries[0]; !strings.HasPrefix(first, "Summary of ") || !strings.Contains(first, `from "turn0 word0`) {
		t.Fatalf("first summary %q, want the local model's, from the first message", first)
	}

	// What the last turn's model call got, from its span.
	last := contextTurnText(turns - 1)[:len("turnN word")]
	var input string // its system instructions, then its messages
	waitfor.True(t, "a chat span with the last turn's input on stdout", func() bool {
		sc := bufio.NewScanner(strings.NewReader(p.out.String()))
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var span struct {
				Name       string
				Attributes []struct {
					Key   string
					Value struct{ Value any }
				}
			}
			if json.Unmarshal(sc.Bytes(), &span) != nil || span.Name != "chat local" {
				continue
			}
			attrs := map[string]string{}
			for _, a := range span.Attributes {
				if s, ok := a.Value.Value.(string); ok {
					attrs[a.Key] = s
				}
			}
			if in := attrs["gen_ai.input.messages"]; strings.Contains(in, last) {
				// The summary follows the system prompt.
				input = attrs["gen_ai.system_instructions"] + "\n" + in
			}
		}
		return input != ""
	})
	if !strings.Contains(input, "Summary of the earlier conversation") || !strings.Contains(input, " messages, from ") || !strings.Contains(input, last) {
		t.Errorf("the last turn's model input holds no summary: %s", input)
	}
	// The summary quotes the first message's first six words; the message
	// itself has fifty of word0.
	if strings.Contains(input, strings.Repeat("word0 ", 8)) {
		t.Errorf("the last turn's model input holds the first message, which the summary covers: %s", input)
	}

	var page struct{ Messages []chat.Message }
	if err := json.Unmarshal(c.command(agent, "messages", map[string]any{}), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Messages) != 2*turns || !strings.HasPrefix(page.Messages[0].Text(), "turn0 ") {
		t.Fatalf("stored conversation: %d messages, want %d from turn0's", len(page.Messages), 2*turns)
	}
}
