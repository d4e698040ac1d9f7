package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/forever-agents/forever/tracing"
	"github.com/forever-agents/forever/tracing/tracingtest"
)

// tracedPrompt makes the local model call clock twice, one call per step,
// the second slow enough to be killed in, then answer.
const tracedPrompt = "/tool clock {}\n/tool clock {\"delayMs\":3000}"

// testBinaryTracing: agentd (with --trust-traceparent) exporting to the real Jaeger all-in-one over
// OTLP runs a chat command sent over NATS with a W3C traceparent header: a
// turn with two tool calls, SIGKILLed while the second runs and recovered
// by a new process. Jaeger then holds one trace, the caller's: the
// command's span is the child of the caller's, the turn's invoke_agent
// span (one, ended by the recovering process, with a forever.recovery
// event) the command's child, and under it a chat span per model call and
// an execute_tool span per tool call, with the GenAI attributes. The
// NATS reply and an HTTP response carry the trace id.
func testBinaryTracing(t *testing.T, bin string) {
	j := tracingtest.StartJaeger(t)
	const service = "agentd-tracing-test"
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	start := func() *agentdProc {
		p := &agentdProc{out: &agentdtest.SyncBuffer{}, exited: make(chan error, 1)}
		p.cmd = exec.Command(bin, "--data", data, "--http", httpAddr, "--nats-listen", natsAddr, "--log-format", "json", "--local-rate", "40",
			"--trust-traceparent") // the caller's span parents agentd's
		p.cmd.Env = append(os.Environ(), j.Env(service)...)
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
		return p
	}
	p := startWith(t, start(), httpAddr)
	c := dialAgentd(t, natsAddr)

	// The caller's span: a trace id and span id of the caller's own.
	const traceID, callerID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	const agent = "traced"
	msg := nats.NewMsg("forever.cmd." + agent + ".chat")
	msg.Data, _ = json.Marshal(map[string]string{"text": tracedPrompt})
	msg.Header.Set("traceparent", "00-"+traceID+"-"+callerID+"-01")
	resp, err := c.nc.RequestMsg(msg, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get(tracing.TraceIDHeader); got != traceID {
		t.Errorf("reply %s = %q, want the caller's trace %s (reply %s)", tracing.TraceIDHeader, got, traceID, resp.Data)
	}
	var reply chathost.Reply
	if err := json.Unmarshal(resp.Data, &reply); err != nil || reply.StreamID == "" {
		t.Fatalf("chat reply %s: %v", resp.Data, err)
	}

	// Kill while the second clock runs: the first call's spans are
	// exported by then (OTEL_BSP_SCHEDULE_DELAY=100), the turn's span not.
	waitfor.True(t, "the second tool call to run", func() bool {
		cs := c.streamChunks(agent, reply.StreamID)
		if hasOutput(cs, 1) {
			t.Fatalf("second tool call not caught running:\n%s", p.out.String())
		}
		return countChunks(cs, chunk.ToolInput) == 2
	})
	waitfor.True(t, "the first call's span in Jaeger", func() bool {
		spans, _ := j.Trace(t.Context(), traceID)
		return len(named(spans, "execute_tool clock")) > 0
	})
	p.kill()
	if spans, _ := j.Trace(t.Context(), traceID); len(named(spans, "execute_tool clock")) != 1 || len(named(spans, "invoke_agent chat")) != 0 {
		t.Fatalf("before recovery Jaeger has %q; want the first execute_tool clock and no invoke_agent", names(spans))
	}
	p = startWith(t, start(), httpAddr)
	waitStreamEnd(t, c, agent, reply.StreamID)

	spans := j.WaitTrace(t, traceID, func(s []tracingtest.Span) bool {
		turns := named(s, "invoke_agent chat")
		return len(turns) > 0 && len(named(s, "chat local")) >= 3 && len(named(s, "execute_tool clock")) >= 2
	})
	commands := named(spans, "command chat")
	if len(commands) != 1 || commands[0].Parent() != callerID {
		t.Fatalf("command spans %+v, want one, the child of the caller's span %s", commands, callerID)
	}
	turns := named(spans, "invoke_agent chat")
	if len(turns) != 1 {
		t.Fatalf("%d invoke_agent spans, want 1: %q", len(turns), names(spans))
	}
	turn := turns[0]
	if turn.Parent() != commands[0].SpanID {
		t.Errorf("invoke_agent's parent = %s, want the command's span %s", turn.Parent(), commands[0].SpanID)
	}
	wantTags(t, turn, map[string]string{
		"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "chat", "gen_ai.agent.id": agent,
		"gen_ai.conversation.id": agent, "gen_ai.provider.name": "local", "gen_ai.request.model": "local",
		"forever.turn.outcome": "completed", "forever.turn.request_id": reply.RequestID,
	})
	recovered := false
	for _, ev := range turn.Events() {
		if ev["event"] == tracing.EventRecovery && ev[string(tracing.RecoveryAttempt)] == "1" {
			recovered = true
		}
	}
	if !recovered {
		t.Errorf("invoke_agent events = %v, want %s with attempt 1", turn.Events(), tracing.EventRecovery)
	}
	chats := named(spans, "chat local")
	if len(chats) != 3 {
		t.Errorf("%d chat spans, want 3 (two tool steps and the answer)", len(chats))
	}
	for _, s := range chats {
		if s.Parent() != turn.SpanID {
			t.Errorf("chat span under %s, want the turn %s", s.Parent(), turn.SpanID)
		}
		wantTags(t, s, map[string]string{"gen_ai.operation.name": "chat", "gen_ai.request.model": "local", "gen_ai.provider.name": "local"})
		for _, k := range []string{"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "forever.usage.cost", "gen_ai.response.finish_reasons"} {
			if _, ok := s.Tag(k); !ok {
				t.Errorf("chat span without %s", k)
			}
		}
	}
	calls := map[string]bool{}
	for _, s := range named(spans, "execute_tool clock") {
		if s.Parent() != turn.SpanID {
			t.Errorf("execute_tool under %s, want the turn %s", s.Parent(), turn.SpanID)
		}
		wantTags(t, s, map[string]string{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "clock", "gen_ai.tool.type": "extension"})
		id, _ := s.Tag("gen_ai.tool.call.id")
		calls[id] = true
	}
	if len(calls) != 2 || calls[""] {
		t.Errorf("execute_tool call ids %v, want two", calls)
	}
	if len(named(spans, "fiber.recover")) == 0 {
		t.Errorf("no fiber.recover span: %q", names(spans))
	}
	for _, s := range spans {
		if _, ok := s.Tag("gen_ai.input.messages"); ok {
			t.Errorf("%s records message contents without --trace-content", s.OperationName)
		}
	}
	// One trace: every turn span of the service is in the caller's.
	all, err := j.Traces(t.Context(), service, "execute_tool clock", 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if strings.HasPrefix(s.OperationName, "execute_tool") && s.TraceID != traceID {
			t.Errorf("%s in trace %s, not the caller's", s.OperationName, s.TraceID)
		}
	}

	// HTTP: POST /v1/chat with a traceparent answers in its trace.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+httpAddr+"/v1/chat",
		strings.NewReader(`{"id":"traced-http","messages":[{"id":"m1","role":"user","parts":[{"type":"text","text":"hi"}]}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-5bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	hr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	agentdtest.ReadSSE(t, hr.Body, 1000)
	hr.Body.Close()
	if got := hr.Header.Get(tracing.TraceIDHeader); hr.StatusCode != http.StatusOK || got != "5bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("POST /v1/chat: %s, %s %q", hr.Status, tracing.TraceIDHeader, got)
	}
	j.WaitTrace(t, "5bf92f3577b34da6a3ce929d0e0e4736", func(s []tracingtest.Span) bool {
		return len(named(s, "POST /v1/chat")) == 1 && len(named(s, "invoke_agent chat")) == 1
	})
}

func named(spans []tracingtest.Span, name string) []tracingtest.Span {
	var out []tracingtest.Span
	for _, s := range spans {
		if s.OperationName == name {
			out = append(out, s)
		}
	}
	return out
}

func names(spans []tracingtest.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.OperationName)
	}
	return out
}

func wantTags(t *testing.T, s tracingtest.Span, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got, _ := s.Tag(k); got != v {
			t.Errorf("%s: %s = %q, want %q", s.OperationName, k, got, v)
		}
	}
}
