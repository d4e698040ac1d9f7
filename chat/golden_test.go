package chat_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/tracing"
	"github.com/forever-agents/forever/verify"
)

var update = flag.Bool("update", false, "rewrite the golden histories in testdata/golden from fresh runs")

// goldenAgent is the agent every golden history is about.
const goldenAgent = "g1"

// goldenTool is the tool the tool-call history offers the model.
var goldenTool = llm.Tool{Name: "get_weather", Description: "Current weather of a city.",
	Schema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}

// goldenEvent is one line of a golden history: an event as stored.
type goldenEvent struct {
	Subject string          `json:"subject"`
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// A golden case records a history with run (against a fresh log, only with
// -update) and checks a fresh log holding that history with check.
type goldenCase struct {
	name  string
	run   func(t *testing.T, e *env)
	check func(t *testing.T, e *env, h golden)
}

// golden is a loaded history: its events and, per stream, the chunks its
// events assemble to.
type golden struct {
	events []goldenEvent
	chunks map[string][]chunk.Chunk
}

// TestGoldenHistories: event logs written by earlier versions, checked into
// testdata/golden, still read: replayed into a fresh log, the messages,
// turns and streams views and the chunk assembler give what the turn
// showed, and recovery goes on from them. A format change that breaks old
// histories fails here. Keep the files; add new ones (go test -run
// TestGoldenHistories -update ./chat/ writes them) rather than rewriting old
// ones once they are committed.
func TestGoldenHistories(t *testing.T) {
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join("testdata", "golden", c.name+".jsonl")
			if _, err := os.Stat(path); *update && errors.Is(err, os.ErrNotExist) {
				// Only new histories are written: a committed one is
				// history, never regenerated.
				e := newEnv(t)
				c.run(t, e)
				writeGolden(t, e.lg, path)
			}
			h := loadGolden(t, path)
			e := newEnv(t)
			replayGolden(t, e, h)
			c.check(t, e, h)
		})
	}
}

func goldenCases() []goldenCase {
	const story = "tell me a story"
	return []goldenCase{
		{
			name: "single_step",
			run: func(t *testing.T, e *env) {
				h := e.host(t, goldenAgent, &fake{scripts: []script{passLocal()}}, nil)
				if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "hello there", Body: []byte(`{"model":"x"}`)}); err != nil {
					t.Fatal(err)
				}
				h.r.Wait()
			},
			check: func(t *testing.T, e *env, h golden) {
				tr := checkCompleted(t, e, h, "hello there")
				if tr.FinishReason != llm.FinishStop || string(tr.Body) != `{"model":"x"}` {
					t.Fatalf("turn = %+v", tr)
				}
				if u, err := e.store.Usage(goldenAgent); err != nil || u.Turns != 1 || u.Output == 0 {
					t.Fatalf("usage = %+v, %v", u, err)
				}
			},
		},
		{
			// A process died mid-stream: the history stops there. A new
			// incarnation recovers and continues it.
			name: "interrupted",
			run: func(t *testing.T, e *env) {
				crash(t, e, goldenAgent, story, 5)
			},
			check: func(t *testing.T, e *env, h golden) {
				tr := lastTurn(t, e, goldenAgent)
				if tr.Status != chat.TurnStreaming {
					t.Fatalf("turn before recovery = %+v", tr)
				}
				partial := chunkText(h.chunks[tr.StreamID])
				if partial == "" {
					t.Fatal("the history holds no text")
				}
				if info := streamInfo(t, e, goldenAgent, tr.StreamID); info.Status != chunk.StatusStreaming || info.Chunks != len(h.chunks[tr.StreamID]) {
					t.Fatalf("stream before recovery = %+v", info)
				}
				p := &fake{scripts: []script{passLocal()}}
				recoverHost(t, e, goldenAgent, p, nil)
				if c := p.reqs[0].Continue; p.Calls() != 1 || c == nil || c.PartialText != partial {
					t.Fatalf("provider calls %d, continuation %+v; want one continuing %q", p.Calls(), c, partial)
				}
				checkCompleted(t, e, readGoldenLog(t, e), story)
				if _, text := streamOf(t, e.lg, goldenAgent, tr.StreamID); !strings.HasPrefix(text, partial) {
					t.Fatalf("stream text %q does not continue %q", text, partial)
				}
			},
		},
		{
			// The same crash, and the recovery that completed the turn.
			name: "interrupted_recovered",
			run: func(t *testing.T, e *env) {
				crash(t, e, goldenAgent, story, 5)
				recoverHost(t, e, goldenAgent, &fake{scripts: []script{passLocal()}}, nil)
			},
			check: func(t *testing.T, e *env, h golden) {
				checkCompleted(t, e, h, story)
				if n := countEvents(h, fiber.EventRecovered); n == 0 {
					t.Fatal("the history holds no recovery")
				}
				// Nothing is left to recover.
				p := &fake{scripts: []script{failWith(errNotCalled)}}
				recoverHost(t, e, goldenAgent, p, nil)
				if p.Calls() != 0 {
					t.Fatalf("provider called %d times for a completed turn", p.Calls())
				}
			},
		},
		{
			// The model asks for a tool and the turn ends (tool calls are
			// the client's to run).
			name: "tool_call",
			run: func(t *testing.T, e *env) {
				p := &fake{scripts: []script{func(ctx context.Context, req llm.Request, yield func(llm.Delta, error) bool) {
					for _, d := range []llm.Delta{
						{Kind: llm.TextDelta, Text: "Let me check the weather."},
						{Kind: llm.ToolInputDelta, ToolCallID: "call_1", ToolName: "get_weather", Text: `{"city":`},
						{Kind: llm.ToolInputDelta, ToolCallID: "call_1", ToolName: "get_weather", Text: `"Paris"}`},
						{Kind: llm.ToolCallDone, ToolCallID: "call_1", ToolName: "get_weather", Input: json.RawMessage(`{"city":"Paris"}`)},
						{Kind: llm.Finish, FinishReason: llm.FinishToolCalls, Usage: &llm.Usage{InputTokens: 12, OutputTokens: 7}},
					} {
						if !yield(d, nil) {
							return
						}
					}
				}}}
				h := e.host(t, goldenAgent, p, nil)
				if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "weather in Paris?", Tools: []llm.Tool{goldenTool}}); err != nil {
					t.Fatal(err)
				}
				h.r.Wait()
			},
			check: func(t *testing.T, e *env, h golden) {
				tr := checkCompleted(t, e, h, "weather in Paris?")
				if tr.FinishReason != llm.FinishToolCalls {
					t.Fatalf("turn = %+v", tr)
				}
				var tools []llm.Tool
				if err := json.Unmarshal(tr.Tools, &tools); err != nil || len(tools) != 1 || !reflect.DeepEqual(tools[0], goldenTool) {
					t.Fatalf("stored tools %s = %+v, %v; want %+v", tr.Tools, tools, err, goldenTool)
				}
				msgs := settled(t, e, goldenAgent)
				want := []chat.Part{
					{Type: chat.PartText, Text: "Let me check the weather."},
					{Type: chat.PartTool, ToolCallID: "call_1", ToolName: "get_weather", State: chat.ToolInputAvailable, Input: json.RawMessage(`{"city":"Paris"}`)},
				}
				if !reflect.DeepEqual(msgs[1].Parts, want) {
					t.Fatalf("assistant parts = %+v, want %+v", msgs[1].Parts, want)
				}
				if u, err := e.store.Usage(goldenAgent); err != nil || u != (chat.Usage{Input: 12, Output: 7, Turns: 1}) {
					t.Fatalf("usage = %+v, %v", u, err)
				}
				// Continuing the turn sends the stored tools and the tool
				// call back to the provider.
				p := &fake{scripts: []script{passLocal()}}
				host := e.host(t, goldenAgent, p, nil)
				if _, err := host.a.ContinueLastTurn(t.Context(), nil); err != nil {
					t.Fatal(err)
				}
				host.r.Wait()
				req := p.reqs[0]
				if !reflect.DeepEqual(req.Tools, []llm.Tool{goldenTool}) || req.Continue == nil || req.Continue.PartialText != "Let me check the weather." {
					t.Fatalf("continuation tools %+v, continue %+v", req.Tools, req.Continue)
				}
				// The next turn sends the tool call back as history.
				if _, err := host.a.Send(t.Context(), chat.SendRequest{Text: "thanks"}); err != nil {
					t.Fatal(err)
				}
				host.r.Wait()
				call := &llm.ToolCall{ID: "call_1", Name: "get_weather", Input: json.RawMessage(`{"city":"Paris"}`)}
				if msgs := p.reqs[1].Messages; len(msgs) < 2 || !slices.ContainsFunc(msgs[1].Parts, func(p llm.Part) bool {
					return p.ToolCall != nil && reflect.DeepEqual(p.ToolCall, call)
				}) {
					t.Fatalf("next turn's messages = %+v, want the tool call", msgs)
				}
			},
		},
		{
			// Three steps: two server tools, then the answer.
			name: "multi_step",
			run: func(t *testing.T, e *env) {
				fx := newSideEffects()
				h := e.host(t, goldenAgent, llm.NewLocal(llm.LocalConfig{Rate: -1}), goldenTools(t, fx))
				if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: twoTools}); err != nil {
					t.Fatal(err)
				}
				h.r.Wait()
			},
			check: func(t *testing.T, e *env, h golden) {
				tr := checkCompleted(t, e, h, twoTools)
				msgs := settled(t, e, goldenAgent)
				parts := toolParts(msgs[1])
				if len(parts) != 2 || parts[0].State != chat.ToolOutput || parts[1].State != chat.ToolOutput {
					t.Fatalf("tool parts = %+v", parts)
				}
				if n := count(h.chunks[tr.StreamID], chunk.StartStep); n != 3 {
					t.Fatalf("%d steps, want 3", n)
				}
				if n := countEvents(h, fiber.EventOpCompleted); n != 2 {
					t.Fatalf("%d op.completed, want one per tool call", n)
				}
			},
		},
		{
			// A process died after the first tool's result was recorded,
			// before its output chunk: recovery writes the recorded result
			// without running the tool again.
			name: "tool_crash",
			run: func(t *testing.T, e *env) {
				fx := newSideEffects()
				h := e.host(t, goldenAgent, llm.NewLocal(llm.LocalConfig{Rate: -1}), goldenTools(t, fx))
				reached := make(chan struct{}, 1)
				chat.StopAt(h.a, func(ctx context.Context, point string) error {
					if point != "tool-recorded" {
						return nil
					}
					reached <- struct{}{}
					<-ctx.Done()
					return ctx.Err()
				})
				if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: twoTools}); err != nil {
					t.Fatal(err)
				}
				wait(t, reached)
				h.r.Close()
			},
			check: func(t *testing.T, e *env, h golden) {
				if tr := lastTurn(t, e, goldenAgent); tr.Status != chat.TurnStreaming {
					t.Fatalf("turn before recovery = %+v", tr)
				}
				fx := newSideEffects()
				recoverHost(t, e, goldenAgent, llm.NewLocal(llm.LocalConfig{Rate: -1}), goldenTools(t, fx))
				tr := lastTurn(t, e, goldenAgent)
				if tr.Status != chat.TurnCompleted {
					t.Fatalf("turn = %+v", tr)
				}
				parts := toolParts(settled(t, e, goldenAgent)[1])
				started, _ := fx.counts()
				if len(parts) != 2 || started[parts[0].ToolCallID] != 0 || started[parts[1].ToolCallID] != 1 {
					t.Fatalf("after recovery: parts %+v, runs %v; want the recorded first result reused", parts, started)
				}
			},
		},
		{
			// Record format 9: the usage stash before the Idempotent tool
			// carries its op.started (fiber.AnnounceStep); the process
			// died before the tool ran. Recovery runs it once, under the
			// announced op, and the Unsafe one once.
			name: "announced_tool_crash",
			run: func(t *testing.T, e *env) {
				fx := newSideEffects()
				h := e.host(t, goldenAgent, llm.NewLocal(llm.LocalConfig{Rate: -1}), atAnnounced(true, goldenTools(t, fx)))
				reached := make(chan struct{}, 1)
				chat.StopAt(h.a, func(ctx context.Context, point string) error {
					if point != "tools-begin" {
						return nil
					}
					reached <- struct{}{}
					<-ctx.Done()
					return ctx.Err()
				})
				if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: twoTools}); err != nil {
					t.Fatal(err)
				}
				wait(t, reached)
				h.r.Close()
			},
			check: func(t *testing.T, e *env, h golden) {
				if n := countEvents(h, fiber.EventOpStarted); n != 0 {
					t.Fatalf("%d op.started stored, want the stash's announcement alone", n)
				}
				if tr := lastTurn(t, e, goldenAgent); tr.Status != chat.TurnStreaming {
					t.Fatalf("turn before recovery = %+v", tr)
				}
				fx := newSideEffects()
				recoverHost(t, e, goldenAgent, llm.NewLocal(llm.LocalConfig{Rate: -1}), goldenTools(t, fx))
				if tr := lastTurn(t, e, goldenAgent); tr.Status != chat.TurnCompleted {
					t.Fatalf("turn = %+v", tr)
				}
				parts := toolParts(settled(t, e, goldenAgent)[1])
				started, completed := fx.counts()
				if len(parts) != 2 || parts[0].State != chat.ToolOutput || parts[1].State != chat.ToolOutput ||
					started[parts[0].ToolCallID] != 1 || completed[parts[1].ToolCallID] != 1 {
					t.Fatalf("after recovery: parts %+v, runs %v; want each tool run once", parts, started)
				}
				if rep, err := verify.Check(t.Context(), e.lg, verify.Options{}); err != nil || !rep.OK() {
					t.Fatalf("verify: %v\n%s", err, rep)
				}
			},
		},
		{
			// A call that needs approval left the turn waiting.
			name: "approval_waiting",
			run: func(t *testing.T, e *env) {
				h := e.host(t, goldenAgent, llm.NewLocal(llm.LocalConfig{Rate: -1}), goldenApprovalTool(t, newSideEffects()))
				if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "/tool risky {\"text\":\"x\"}"}); err != nil {
					t.Fatal(err)
				}
				h.r.Wait()
			},
			check: func(t *testing.T, e *env, h golden) {
				tr := lastTurn(t, e, goldenAgent)
				if tr.Status != chat.TurnCompleted || tr.FinishReason != llm.FinishToolCalls {
					t.Fatalf("turn = %+v", tr)
				}
				parts := toolParts(settled(t, e, goldenAgent)[1])
				if len(parts) != 1 || parts[0].State != chat.ToolApprovalRequested || parts[0].Approval == nil {
					t.Fatalf("parts = %+v", parts)
				}
				fx := newSideEffects()
				host := e.host(t, goldenAgent, llm.NewLocal(llm.LocalConfig{Rate: -1}), goldenApprovalTool(t, fx))
				if _, err := host.a.Answer(t.Context(), []chat.ToolAnswer{{ApprovalID: parts[0].Approval.ID, Approved: approved(true)}}, nil); err != nil {
					t.Fatal(err)
				}
				host.r.Wait()
				parts = toolParts(settled(t, e, goldenAgent)[1])
				if _, done := fx.counts(); parts[0].State != chat.ToolOutput || done[parts[0].ToolCallID] != 1 {
					t.Fatalf("after the approval: %+v, runs %v", parts, done)
				}
			},
		},
		{
			// The provider refused the request: the turn failed.
			name: "failed",
			run: func(t *testing.T, e *env) {
				p := &fake{scripts: []script{failWith(&llm.Error{Provider: "fake", Status: 401, Err: errors.New("bad key")})}}
				h := e.host(t, goldenAgent, p, nil)
				if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "hello"}); err != nil {
					t.Fatal(err)
				}
				h.r.Wait()
			},
			check: func(t *testing.T, e *env, h golden) {
				msgs := settled(t, e, goldenAgent)
				if len(msgs) != 1 || msgs[0].Text() != "hello" {
					t.Fatalf("messages = %+v, want the user's only", msgs)
				}
				tr := checkFailed(t, e, h, "bad key")
				if cs := h.chunks[tr.StreamID]; len(cs) != 2 || cs[0].Type != chunk.Start || cs[1].Type != chunk.Error {
					t.Fatalf("chunks = %+v, want start and error", cs)
				}
				checkTakesNext(t, e)
			},
		},
		{
			// A crashed turn whose recovery kept failing was abandoned: it
			// ends with an error, its partial answer kept.
			name: "abandoned",
			run: func(t *testing.T, e *env) {
				turn := crash(t, e, goldenAgent, story, 5)
				h := e.host(t, goldenAgent, &fake{scripts: []script{failWith(errNotCalled)}}, nil)
				if err := h.a.AbandonTurn(t.Context(), chat.TurnFiberPrefix+turn.RequestID, errors.New("hook kept failing")); err != nil {
					t.Fatal(err)
				}
			},
			check: func(t *testing.T, e *env, h golden) {
				tr := checkFailed(t, e, h, "abandoned")
				partial := chunkText(h.chunks[tr.StreamID])
				msgs := settled(t, e, goldenAgent)
				if len(msgs) != 2 || msgs[0].Text() != story || msgs[1].ID != tr.AssistantMessageID || msgs[1].Text() != partial || partial == "" {
					t.Fatalf("messages = %+v, want the user's and the partial %q", msgs, partial)
				}
				checkTakesNext(t, e)
			},
		},
		{
			// A Send killed after turn.started, which carries the user
			// message, before the message.appended kept for older
			// readers: the message is in the conversation, and recovery
			// answers it.
			name: "message_in_turn",
			run: func(t *testing.T, e *env) {
				h := e.host(t, goldenAgent, &fake{scripts: []script{passLocal()}}, nil)
				reached := make(chan struct{})
				chat.StopAt(h.a, func(ctx context.Context, point string) error {
					if point != "send-turn-stored" {
						return nil
					}
					close(reached)
					<-ctx.Done()
					return ctx.Err()
				})
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan struct{})
				go func() {
					defer close(done)
					h.a.Send(ctx, chat.SendRequest{Text: "hello there"})
				}()
				wait(t, reached)
				h.r.Close()
				cancel()
				<-done
			},
			check: func(t *testing.T, e *env, h golden) {
				if n := countEvents(h, chat.EventMessageAppended); n != 0 {
					t.Fatalf("%d message.appended in the history, want none", n)
				}
				if msgs := settled(t, e, goldenAgent); len(msgs) != 1 || msgs[0].Role != chat.RoleUser || msgs[0].Text() != "hello there" {
					t.Fatalf("messages before recovery = %+v", msgs)
				}
				recoverHost(t, e, goldenAgent, &fake{scripts: []script{passLocal()}}, nil)
				checkCompleted(t, e, readGoldenLog(t, e), "hello there")
			},
		},
		{
			// An answer too large for one event: the assistant message is
			// stored as message.part events (recorded with 2 KiB events so
			// the file stays small), read back whole.
			name: "large_answer",
			run: func(t *testing.T, e *env) {
				long := strings.Repeat("All work and no play makes a long answer. ", 250)
				p := &fake{scripts: []script{func(ctx context.Context, _ llm.Request, yield func(llm.Delta, error) bool) {
					if yield(llm.Delta{Kind: llm.TextDelta, Text: long}, nil) {
						yield(llm.Delta{Kind: llm.Finish, FinishReason: llm.FinishStop, Usage: &llm.Usage{InputTokens: 3, OutputTokens: 2500}}, nil)
					}
				}}}
				h := e.host(t, goldenAgent, p, func(c *chat.Config) { c.MaxPayload = 2 << 10 })
				if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "say a lot"}); err != nil {
					t.Fatal(err)
				}
				h.r.Wait()
			},
			check: func(t *testing.T, e *env, h golden) {
				checkCompleted(t, e, h, "say a lot")
				parts := 0
				for _, ev := range h.events {
					if ev.Type == chat.EventMessagePart {
						parts++
					}
				}
				if parts < 2 {
					t.Fatalf("%d message.part events in the history", parts)
				}
				checkTakesNext(t, e)
			},
		},
		{
			// A conversation past its context budget of 300 tokens: the
			// third turn's summary was made, the process died before it
			// was stored (context.summarized), and the recovered turn
			// stored the recorded summary without making it again.
			name: "context_summarized",
			run: func(t *testing.T, e *env) {
				h := e.host(t, goldenAgent, &fake{scripts: []script{passLocal()}}, withBudget(300))
				talk(t, h, 0, 2)
				reached := make(chan struct{}, 1)
				chat.StopAt(h.a, func(ctx context.Context, point string) error {
					if point != "summary-recorded" {
						return nil
					}
					reached <- struct{}{}
					<-ctx.Done()
					return ctx.Err()
				})
				if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: longMessage(2)}); err != nil {
					t.Fatal(err)
				}
				wait(t, reached)
				h.r.Close()
				recoverHost(t, e, goldenAgent, &fake{scripts: []script{passLocal()}}, withBudget(300))
			},
			check: func(t *testing.T, e *env, h golden) {
				if msgs := settled(t, e, goldenAgent); len(msgs) != 6 {
					t.Fatalf("%d messages, want 6", len(msgs))
				}
				if tr := lastTurn(t, e, goldenAgent); tr.Status != chat.TurnCompleted {
					t.Fatalf("turn = %+v", tr)
				}
				var stored []chat.Summary
				for _, ev := range h.events {
					if ev.Type == chat.EventContextSummarized {
						var s chat.Summary
						if err := json.Unmarshal(ev.Data, &s); err != nil {
							t.Fatal(err)
						}
						stored = append(stored, s)
					}
				}
				sum, ok, err := e.store.Summary(goldenAgent)
				if err != nil || !ok || len(stored) != 1 || sum != stored[0] {
					t.Fatalf("summary view %+v (%v, %v), history's %+v", sum, ok, err, stored)
				}
				// The next turn builds on the stored summary.
				p := &fake{scripts: []script{passLocal()}}
				hn := recoverHost(t, e, goldenAgent, p, withBudget(300))
				talk(t, hn, 3, 4)
				if len(p.reqs) == 0 || !strings.Contains(p.reqs[0].System+p.reqs[0].Messages[0].PlainText(), sum.Text) {
					t.Fatalf("the next turn's first request does not hold the stored summary %q", sum.Text)
				}
			},
		},
		{
			// tool_crash with tracing on: fiber.started and turn.started
			// carry the turn's span (traceparent, parentSpanId). A
			// recovery with tracing resumes it: same trace, same span id,
			// same parent.
			name: "traced_tool_crash",
			run: func(t *testing.T, e *env) {
				tp, _ := newTracerProvider(t)
				e.tp = tp
				fx := newSideEffects()
				h := e.host(t, goldenAgent, llm.NewLocal(llm.LocalConfig{Rate: -1}), goldenTools(t, fx))
				reached := make(chan struct{}, 1)
				chat.StopAt(h.a, func(ctx context.Context, point string) error {
					if point != "tool-recorded" {
						return nil
					}
					reached <- struct{}{}
					<-ctx.Done()
					return ctx.Err()
				})
				ctx, caller := tp.Tracer("test").Start(t.Context(), "caller")
				if _, err := h.a.Send(ctx, chat.SendRequest{Text: twoTools}); err != nil {
					t.Fatal(err)
				}
				caller.End()
				wait(t, reached)
				h.r.Close()
			},
			check: func(t *testing.T, e *env, h golden) {
				tr := lastTurn(t, e, goldenAgent)
				self, ok := tracing.Parse(tr.TraceParent)
				if tr.Status != chat.TurnStreaming || !ok || len(tr.ParentSpanID) != 16 {
					t.Fatalf("turn before recovery = %+v", tr)
				}
				tp, exp := newTracerProvider(t)
				e.tp = tp
				recoverHost(t, e, goldenAgent, llm.NewLocal(llm.LocalConfig{Rate: -1}), goldenTools(t, newSideEffects()))
				if tr := lastTurn(t, e, goldenAgent); tr.Status != chat.TurnCompleted {
					t.Fatalf("turn = %+v", tr)
				}
				turns := spansNamed(exp.GetSpans(), "invoke_agent")
				if len(turns) != 1 || turns[0].SpanContext.TraceID() != self.TraceID() || turns[0].SpanContext.SpanID() != self.SpanID() ||
					turns[0].Parent.SpanID().String() != tr.ParentSpanID {
					t.Fatalf("invoke_agent spans %+v, want one resuming %s under %s", turns, tr.TraceParent, tr.ParentSpanID)
				}
				for _, s := range spansNamed(exp.GetSpans(), "fiber.recover") {
					if s.Parent.SpanID() != self.SpanID() {
						t.Errorf("fiber.recover under %s, want the turn's span %s (fiber.started's traceparent)", s.Parent.SpanID(), self.SpanID())
					}
				}
			},
		},
	}
}

func countEvents(h golden, typ string) int {
	n := 0
	for _, ev := range h.events {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

func chunkText(cs []chunk.Chunk) string {
	var b strings.Builder
	for _, c := range cs {
		if c.Type == chunk.TextDelta {
			b.WriteString(c.Delta)
		}
	}
	return b.String()
}

// checkCompleted checks the views of a history whose one turn, from user
// text prompt, completed: two messages, the answer being what the stream
// showed; the stream and the turn completed. It returns the turn.
func checkCompleted(t *testing.T, e *env, h golden, prompt string) chat.TurnInfo {
	t.Helper()
	msgs := settled(t, e, goldenAgent)
	tr := lastTurn(t, e, goldenAgent)
	cs := h.chunks[tr.StreamID]
	if tr.Status != chat.TurnCompleted || tr.Orphaned {
		t.Fatalf("turn = %+v", tr)
	}
	if len(msgs) != 2 || msgs[0].Role != chat.RoleUser || msgs[0].Text() != prompt || msgs[0].RequestID != tr.RequestID ||
		msgs[1].Role != chat.RoleAssistant || msgs[1].ID != tr.AssistantMessageID {
		t.Fatalf("messages = %+v", msgs)
	}
	if text := chunkText(cs); text == "" || msgs[1].Text() != text {
		t.Fatalf("assistant text %q, stream text %q", msgs[1].Text(), text)
	}
	if len(cs) < 3 || cs[0].Type != chunk.Start || cs[0].RequestID != tr.RequestID || cs[0].MessageID != tr.AssistantMessageID ||
		cs[len(cs)-1].Type != chunk.Finish || count(cs, chunk.Start) != 1 || count(cs, chunk.Finish) != 1 {
		t.Fatalf("chunks = %+v", cs)
	}
	info := streamInfo(t, e, goldenAgent, tr.StreamID)
	if info.Status != chunk.StatusCompleted || info.Chunks != len(cs) || info.RequestID != tr.RequestID || info.MessageID != tr.AssistantMessageID {
		t.Fatalf("stream = %+v (%d chunks)", info, len(cs))
	}
	if got := readChunks(t, e.lg, goldenAgent, tr.StreamID); !reflect.DeepEqual(got, cs) {
		t.Fatalf("replayed chunks differ from the history's")
	}
	if rows := runs(t, e, goldenAgent); len(rows) != 0 {
		t.Fatalf("runs table: %+v", rows)
	}
	return tr
}

// checkFailed checks a history whose last turn failed with an error naming
// want, shown as the stream's error chunk. It returns the turn.
func checkFailed(t *testing.T, e *env, h golden, want string) chat.TurnInfo {
	t.Helper()
	settled(t, e, goldenAgent)
	tr := lastTurn(t, e, goldenAgent)
	if tr.Status != chat.TurnFailed || !strings.Contains(tr.Error, want) {
		t.Fatalf("turn = %+v, want failed with %q", tr, want)
	}
	cs := h.chunks[tr.StreamID]
	if last := cs[len(cs)-1]; last.Type != chunk.Error || !strings.Contains(last.ErrorText, want) {
		t.Fatalf("stream ends with %+v", last)
	}
	if info := streamInfo(t, e, goldenAgent, tr.StreamID); info.Status != chunk.StatusError || !strings.Contains(info.Error, want) || info.Chunks != len(cs) {
		t.Fatalf("stream = %+v", info)
	}
	return tr
}

// checkTakesNext checks that the agent takes a new turn after the history.
func checkTakesNext(t *testing.T, e *env) {
	t.Helper()
	h := recoverHost(t, e, goldenAgent, &fake{scripts: []script{passLocal()}}, nil)
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "next"}); err != nil {
		t.Fatalf("send after the history: %v", err)
	}
	h.r.Wait()
	if tr := lastTurn(t, e, goldenAgent); tr.Status != chat.TurnCompleted {
		t.Fatalf("next turn = %+v", tr)
	}
}

// readGoldenLog reads the golden agent's history from lg, events in the
// order they were stored (by time, across the events and chunks streams).
func readGoldenLog(t *testing.T, e *env) golden {
	t.Helper()
	evs, err := e.lg.Read(t.Context(), eventlog.Filter{Agent: goldenAgent}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := e.lg.Read(t.Context(), eventlog.Filter{Agent: goldenAgent, Chunks: true}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	all := append(evs, cs...)
	slices.SortStableFunc(all, func(a, b eventlog.Event) int { return a.Time.Compare(b.Time) })
	var h golden
	for _, ev := range all {
		h.events = append(h.events, goldenEvent{Subject: ev.Subject, ID: ev.ID, Type: ev.Type, Data: ev.Data})
	}
	h.assemble(t)
	return h
}

func writeGolden(t *testing.T, lg *eventlog.Log, path string) {
	t.Helper()
	h := readGoldenLog(t, &env{lg: lg})
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, ev := range h.events {
		if err := enc.Encode(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func loadGolden(t *testing.T, path string) golden {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v (run with -update to record it)", err)
	}
	defer f.Close()
	var h golden
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var ev goldenEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		h.events = append(h.events, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(h.events) == 0 {
		t.Fatalf("%s is empty", path)
	}
	h.assemble(t)
	return h
}

// assemble sets h.chunks from h's chunk events, with the assembler readers
// use.
func (h *golden) assemble(t *testing.T) {
	t.Helper()
	h.chunks = map[string][]chunk.Chunk{}
	asm := map[string]*chunk.Assembler{}
	for _, ev := range h.events {
		_, stream := goldenTarget(t, ev.Subject)
		if stream == "" {
			continue
		}
		a := asm[stream]
		if a == nil {
			a = &chunk.Assembler{}
			asm[stream] = a
		}
		cs, err := a.Chunks(ev.Type, ev.Data)
		if err != nil {
			t.Fatalf("chunk %s of %s: %v", ev.ID, stream, err)
		}
		h.chunks[stream] = append(h.chunks[stream], cs...)
	}
}

// goldenTarget returns the agent and stream ("" for the events subject) of
// a stored subject: <prefix>.evt.<agent> or <prefix>.chunk.<agent>.<stream>.
func goldenTarget(t *testing.T, subject string) (agent, stream string) {
	t.Helper()
	toks := strings.Split(subject, ".")
	for i := len(toks) - 2; i >= 0; i-- {
		switch {
		case toks[i] == "evt" && i == len(toks)-2:
			return toks[i+1], ""
		case toks[i] == "chunk" && i == len(toks)-3:
			return toks[i+1], toks[i+2]
		}
	}
	t.Fatalf("subject %q is neither an events nor a chunks subject", subject)
	return "", ""
}

// replayGolden appends h's events to e's log as they were stored, and waits
// until the views have applied them.
func replayGolden(t *testing.T, e *env, h golden) {
	t.Helper()
	for _, ev := range h.events {
		agent, stream := goldenTarget(t, ev.Subject)
		if _, err := e.lg.Append(t.Context(), eventlog.Event{Agent: agent, Stream: stream, Type: ev.Type, ID: ev.ID, Data: ev.Data}); err != nil {
			t.Fatalf("append %s %s: %v", ev.Type, ev.ID, err)
		}
	}
	last, err := e.lg.LastSeq(t.Context(), eventlog.Filter{Agent: goldenAgent, Chunks: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.WaitForChunks(t.Context(), last); err != nil {
		t.Fatal(err)
	}
	settled(t, e, goldenAgent)
}

// goldenTools are the server tools of the multi-step histories.
func goldenTools(t *testing.T, fx *sideEffects) func(*chat.Config) {
	return withTools(t, fx.tool(t, "safe", chat.Idempotent), fx.tool(t, "risky", chat.Unsafe))
}

// goldenApprovalTool is a tool named risky that always needs approval.
func goldenApprovalTool(t *testing.T, fx *sideEffects) func(*chat.Config) {
	tool, err := chat.NewTool("risky", "needs approval", func(ctx context.Context, in echoIn) (echoOut, error) {
		call, _ := chat.ToolCallFrom(ctx)
		fx.mu.Lock()
		fx.completed[call.CallID]++
		fx.mu.Unlock()
		return echoOut{Echo: in.Text}, nil
	}, chat.AlwaysNeedsApproval())
	if err != nil {
		t.Fatal(err)
	}
	return withTools(t, tool)
}
