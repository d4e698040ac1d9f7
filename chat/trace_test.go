package chat_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/forever-agents/forever/tracing"
)

func newTracerProvider(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(tracing.IDGenerator{}))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp, exp
}

func attrOf(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

func spansNamed(spans tracetest.SpanStubs, prefix string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if strings.HasPrefix(s.Name, prefix) {
			out = append(out, s)
		}
	}
	return out
}

// TestTurnTraceSurvivesCrash: a turn with two tool calls, cut after its
// first tool's result was recorded and recovered by a new runner, is one
// trace under the caller's span: one invoke_agent span (ended once, by the
// recovered run, with the id stored in turn.started, its start, and a
// forever.recovery event), a chat span per provider call and an
// execute_tool span per call, all its children, with the GenAI attributes;
// no message content is recorded unless TraceContent says so.
func TestTurnTraceSurvivesCrash(t *testing.T) {
	for _, content := range []bool{false, true} {
		name := "without content"
		if content {
			name = "with TraceContent"
		}
		t.Run(name, func(t *testing.T) {
			tp, exp := newTracerProvider(t)
			e := newEnv(t)
			e.tp = tp
			fx := newSideEffects()
			tools := withTools(t, fx.tool(t, "safe", chat.Idempotent), fx.tool(t, "risky", chat.Unsafe))
			opt := priced(tools, func(c *chat.Config) { c.TraceContent = content })
			local := llm.NewLocal(llm.LocalConfig{Rate: -1})
			h := e.host(t, "a1", local, opt)
			chat.StopAt(h.a, func(ctx context.Context, point string) error {
				if point != "tool-recorded" {
					return nil
				}
				fx.reached <- struct{}{}
				<-ctx.Done()
				return ctx.Err()
			})
			ctx, caller := tp.Tracer("test").Start(t.Context(), "caller")
			if _, err := h.a.Send(ctx, chat.SendRequest{Text: twoTools}); err != nil {
				t.Fatal(err)
			}
			caller.End()
			wait(t, fx.reached)
			h.r.Close() // the process dies after the first tool's result is recorded
			if n := len(spansNamed(exp.GetSpans(), "invoke_agent")); n != 0 {
				t.Fatalf("%d invoke_agent spans ended by the run that crashed, want 0", n)
			}

			recoverHost(t, e, "a1", local, opt)
			tr := lastTurn(t, e, "a1")
			if tr.Status != chat.TurnCompleted {
				t.Fatalf("turn = %s %q", tr.Status, tr.Error)
			}

			spans := exp.GetSpans()
			for _, s := range spans {
				if s.SpanContext.TraceID() != caller.SpanContext().TraceID() {
					t.Errorf("span %q is in trace %s, not the caller's %s", s.Name, s.SpanContext.TraceID(), caller.SpanContext().TraceID())
				}
			}
			turns := spansNamed(spans, "invoke_agent")
			if len(turns) != 1 || turns[0].Name != "invoke_agent chat" {
				t.Fatalf("invoke_agent spans = %d, want one \"invoke_agent chat\"", len(turns))
			}
			turn := turns[0]
			if got, want := tr.TraceParent, tracing.Format(turn.SpanContext); got != want {
				t.Errorf("turn.started traceparent = %q, want the span's %q", got, want)
			}
			if turn.Parent.SpanID() != caller.SpanContext().SpanID() {
				t.Errorf("invoke_agent's parent = %s, want the caller %s", turn.Parent.SpanID(), caller.SpanContext().SpanID())
			}
			if !turn.StartTime.Equal(tr.StartedAt) {
				t.Errorf("invoke_agent starts at %v, want the turn's start %v", turn.StartTime, tr.StartedAt)
			}
			for k, v := range map[string]string{
				"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "chat", "gen_ai.agent.id": "a1",
				"gen_ai.conversation.id": "a1", "gen_ai.provider.name": "local", "forever.turn.outcome": "completed",
				"gen_ai.response.finish_reasons": `["stop"]`,
			} {
				if got := attrOf(turn, k); got != v {
					t.Errorf("invoke_agent %s = %q, want %q", k, got, v)
				}
			}
			for _, k := range []string{"gen_ai.usage.output_tokens", "forever.usage.cost"} {
				if attrOf(turn, k) == "" {
					t.Errorf("invoke_agent has no %s", k)
				}
			}
			if len(turn.Events) != 1 || turn.Events[0].Name != tracing.EventRecovery {
				t.Errorf("invoke_agent events = %+v, want one %s", turn.Events, tracing.EventRecovery)
			}

			chats := spansNamed(spans, "chat ")
			if len(chats) != 3 {
				t.Errorf("%d chat spans, want 3 (a call per step)", len(chats))
			}
			for _, s := range chats {
				if s.Name != "chat local" || s.SpanKind != trace.SpanKindClient || s.Parent.SpanID() != turn.SpanContext.SpanID() {
					t.Errorf("chat span %q kind %s parent %s, want \"chat local\", client, under the turn", s.Name, s.SpanKind, s.Parent.SpanID())
				}
				for _, k := range []string{"gen_ai.request.model", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "forever.usage.cost", "gen_ai.response.finish_reasons"} {
					if attrOf(s, k) == "" {
						t.Errorf("chat span has no %s", k)
					}
				}
			}
			var calls []string
			for _, s := range spansNamed(spans, "execute_tool") {
				if s.Parent.SpanID() != turn.SpanContext.SpanID() {
					t.Errorf("%s: parent %s, want the turn", s.Name, s.Parent.SpanID())
				}
				if attrOf(s, "gen_ai.tool.call.id") == "" || attrOf(s, "gen_ai.tool.name") == "" {
					t.Errorf("%s without gen_ai.tool.name or gen_ai.tool.call.id", s.Name)
				}
				calls = append(calls, s.Name+" "+attrOf(s, "forever.tool.outcome"))
			}
			// safe ran before the crash and was replayed from its record after it.
			if want := []string{"execute_tool safe ok", "execute_tool safe replayed", "execute_tool risky ok"}; !slices.Equal(calls, want) {
				t.Errorf("execute_tool spans = %q, want %q", calls, want)
			}
			if n := len(spansNamed(spans, "fiber.recover")); n != 1 {
				t.Errorf("%d fiber.recover spans, want 1", n)
			}

			for _, s := range spans {
				for _, kv := range s.Attributes {
					k := string(kv.Key)
					recorded := k == "gen_ai.input.messages" || k == "gen_ai.output.messages" || k == "gen_ai.tool.call.arguments" || k == "gen_ai.tool.call.result"
					if recorded && !content {
						t.Errorf("span %q records %s without TraceContent", s.Name, k)
					}
				}
			}
			if content {
				if in := attrOf(chats[0], "gen_ai.input.messages"); !strings.Contains(in, `"content":"/tool safe`) {
					t.Errorf("first chat span's input messages = %s, want the prompt", in)
				}
				if out := attrOf(turn, "gen_ai.output.messages"); !strings.Contains(out, "The safe tool returned") {
					t.Errorf("invoke_agent output messages = %s, want the answer", out)
				}
			}
		})
	}
}

// TestSubagentTraceNests: a sub-agent call is a child invoke_agent: the
// child's turn is in the caller's trace, its invoke_agent span the child
// of the parent turn's invoke_agent, and its model calls under it.
func TestSubagentTraceNests(t *testing.T) {
	tp, exp := newTracerProvider(t)
	e := newEnv(t)
	e.tp = tp
	m := newMesh(t, e, local)
	ctx, caller := tp.Tracer("test").Start(t.Context(), "caller")
	if _, err := m.get("boss").a.Send(ctx, chat.SendRequest{Text: "/agent kid-a hello a"}); err != nil {
		t.Fatal(err)
	}
	caller.End()
	if tr := awaitTurn(t, e, "boss"); tr.Status != chat.TurnCompleted {
		t.Fatalf("parent turn %s: %s", tr.Status, tr.Error)
	}
	// Spans end just after their turns do.
	byAgent := map[string]tracetest.SpanStub{}
	waitfor.NoError(t, func() error {
		for _, s := range spansNamed(exp.GetSpans(), "invoke_agent") {
			byAgent[attrOf(s, "gen_ai.agent.id")] = s
		}
		if len(byAgent) < 2 {
			return fmt.Errorf("invoke_agent spans of boss and kid-a, have %v", slices.Collect(maps.Keys(byAgent)))
		}
		return nil
	})
	boss, kid := byAgent["boss"], byAgent["kid-a"]
	for _, s := range []tracetest.SpanStub{boss, kid} {
		if s.SpanContext.TraceID() != caller.SpanContext().TraceID() {
			t.Errorf("span %q of %s is in trace %s, not the caller's %s", s.Name, attrOf(s, "gen_ai.agent.id"), s.SpanContext.TraceID(), caller.SpanContext().TraceID())
		}
	}
	if boss.Parent.SpanID() != caller.SpanContext().SpanID() {
		t.Errorf("the parent turn's span is under %s, want the caller %s", boss.Parent.SpanID(), caller.SpanContext().SpanID())
	}
	if kid.Parent.SpanID() != boss.SpanContext.SpanID() {
		t.Errorf("the child turn's invoke_agent is under %s, want the parent turn's %s", kid.Parent.SpanID(), boss.SpanContext.SpanID())
	}
	kidChats := 0
	for _, s := range spansNamed(exp.GetSpans(), "chat ") {
		if attrOf(s, "gen_ai.conversation.id") == "kid-a" {
			kidChats++
			if s.Parent.SpanID() != kid.SpanContext.SpanID() {
				t.Errorf("the child's chat span is under %s, want its invoke_agent %s", s.Parent.SpanID(), kid.SpanContext.SpanID())
			}
		}
	}
	if kidChats == 0 {
		t.Error("no chat span of the child's model call")
	}
}

// TestToolErrorSpanStatus: a tool's error text, which can quote user
// input, is the execute_tool span's status only with TraceContent;
// without, the status and error.type carry the error's type alone.
func TestToolErrorSpanStatus(t *testing.T) {
	const secret = "no city named Secretville"
	for _, content := range []bool{false, true} {
		t.Run(fmt.Sprintf("content=%v", content), func(t *testing.T) {
			tp, exp := newTracerProvider(t)
			e := newEnv(t)
			e.tp = tp
			leaky := chat.MustTool("leaky", "fails quoting its input", func(context.Context, struct{}) (int, error) {
				return 0, &chat.ToolError{Type: "not_found", Message: secret}
			})
			tools := withTools(t, leaky)
			h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), func(c *chat.Config) { tools(c); c.TraceContent = content })
			if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "/tool leaky {}"}); err != nil {
				t.Fatal(err)
			}
			awaitTurn(t, e, "a1")
			var calls []tracetest.SpanStub
			waitfor.True(t, "an execute_tool leaky span", func() bool {
				calls = spansNamed(exp.GetSpans(), "execute_tool leaky")
				return len(calls) > 0
			})
			if len(calls) != 1 {
				t.Fatalf("%d execute_tool leaky spans, want 1", len(calls))
			}
			s := calls[0]
			if got := attrOf(s, "error.type"); got != "not_found" {
				t.Errorf("error.type = %q, want not_found", got)
			}
			if got := strings.Contains(s.Status.Description, secret); got != content {
				t.Errorf("status %q quotes the error text: %v, want %v", s.Status.Description, got, content)
			}
			if !content && s.Status.Description != "not_found" {
				t.Errorf("status %q, want the error's type alone", s.Status.Description)
			}
		})
	}
}
