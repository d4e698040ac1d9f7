package chat

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/forever-agents/forever/chat/cost"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/tracing"
)

// Spans of a chat agent (Config.TracerProvider), following the
// OpenTelemetry GenAI semantic conventions:
//
//	invoke_agent <AgentName>  a turn, from its command to its outcome, across
//	                          crashes (stored in turn.started, resumed by the
//	                          run that finishes it, a forever.recovery event
//	                          per recovery)
//	chat <model>              one provider call (a step, or its continuation)
//	execute_tool <tool>       one server tool call, with the fiber.step under it
//
// Message contents (prompts, answers, tool arguments and results) are
// recorded only with Config.TraceContent.

// agentName is gen_ai.agent.name: the agent type.
func (a *Agent) agentName() string {
	if a.cfg.AgentName != "" {
		return a.cfg.AgentName
	}
	return "chat"
}

// modelName is the model the provider is asked for: Config.Model, or the
// provider's configured model.
func (a *Agent) modelName() string {
	if a.cfg.Model != "" {
		return a.cfg.Model
	}
	if m, ok := a.cfg.Provider.(interface{ Model() string }); ok && m.Model() != "" {
		return m.Model()
	}
	return a.cfg.Provider.Name()
}

// turnAttrs are the attributes of a turn's invoke_agent span.
func (a *Agent) turnAttrs(requestID, streamID string) []attribute.KeyValue {
	return []attribute.KeyValue{
		tracing.GenAIOperationName.String(tracing.OpInvokeAgent),
		tracing.GenAIAgentName.String(a.agentName()),
		tracing.GenAIAgentID.String(a.agent),
		tracing.GenAIConversationID.String(a.agent),
		tracing.GenAIProviderName.String(a.cfg.Provider.Name()),
		tracing.GenAIRequestModel.String(a.modelName()),
		tracing.AgentID.String(a.agent),
		tracing.RequestID.String(requestID),
		tracing.StreamID.String(streamID),
	}
}

// startTurnSpan starts the invoke_agent span of the new turn t, the child
// of ctx's span (the command's), or, for a turn that answers a waiting call,
// of the span of the turn that asked (follows, its traceparent), linked to
// ctx's span. It records the span in t, so a recovery resumes it.
func (a *Agent) startTurnSpan(ctx context.Context, t *turnStarted, msg *Message, follows string) (context.Context, trace.Span) {
	if !a.tracer.On() {
		return a.tracer.Start(ctx, "")
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
	if sc, ok := tracing.Parse(follows); ok {
		if link := trace.SpanContextFromContext(ctx); link.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: link}))
		}
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	parent := trace.SpanContextFromContext(ctx)
	ctx, span := a.tracer.Start(ctx, tracing.OpInvokeAgent+" "+a.agentName(), opts...)
	t.TraceParent = tracing.Format(span.SpanContext())
	if parent.IsValid() {
		t.ParentSpanID = parent.SpanID().String()
	}
	if span.IsRecording() {
		span.SetAttributes(a.turnAttrs(t.RequestID, t.StreamID)...)
		if a.cfg.TraceContent && msg != nil {
			span.SetAttributes(tracing.GenAIInputMessages.String(contentJSON([]llm.Message{toLLMMessage(*msg)})))
		}
	}
	return ctx, span
}

// resumeTurnSpan resumes the invoke_agent span of a turn stored with one
// (a new span under ctx's for a turn stored without), with a
// forever.recovery event for this attempt.
func (a *Agent) resumeTurnSpan(ctx context.Context, info TurnInfo, attempt int) (context.Context, trace.Span) {
	if !a.tracer.On() {
		return a.tracer.Start(ctx, "")
	}
	name := tracing.OpInvokeAgent + " " + a.agentName()
	var span trace.Span
	if self, ok := tracing.Parse(info.TraceParent); ok {
		parentID, _ := trace.SpanIDFromHex(info.ParentSpanID)
		ctx, span = a.tracer.Resume(ctx, name, self, parentID, info.StartedAt, trace.WithSpanKind(trace.SpanKindInternal))
	} else {
		ctx, span = a.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal))
	}
	if span.IsRecording() {
		span.SetAttributes(a.turnAttrs(info.RequestID, info.StreamID)...)
		if attempt > 0 {
			span.AddEvent(tracing.EventRecovery, trace.WithAttributes(tracing.RecoveryAttempt.Int(attempt)))
		}
	}
	return ctx, span
}

// endTurnSpan ends a run's invoke_agent span, unless the run left the
// turn for a later one (shutdown, a log failure, another owner): that run
// resumes the span and ends it.
func (a *Agent) endTurnSpan(ctx context.Context, span trace.Span, err error) {
	if span == nil || !span.IsRecording() {
		return
	}
	if err != nil && (ctx.Err() != nil || fiber.LogFailed(err) || eventlog.OwnerLost(err)) {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// noteOutcome records how the turn ended on its invoke_agent span.
func (st *turnRun) noteOutcome(outcome, reason string, usage *llm.Usage, errMsg string, content bool) {
	span := st.span
	if span == nil || !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{tracing.TurnOutcome.String(outcome)}
	if reason != "" {
		attrs = append(attrs, tracing.GenAIResponseFinish.StringSlice([]string{reason}))
	}
	if usage != nil {
		attrs = append(attrs, tracing.GenAIUsageInputTokens.Int64(usage.InputTokens), tracing.GenAIUsageOutputTokens.Int64(usage.OutputTokens))
	}
	if content && st.b != nil {
		msg := toLLMMessage(Message{Role: RoleAssistant, Parts: st.parts()})
		attrs = append(attrs, tracing.GenAIOutputMessages.String(contentJSON([]llm.Message{msg}, reason)))
	}
	span.SetAttributes(attrs...)
	if errMsg != "" {
		span.SetStatus(codes.Error, errMsg)
	}
}

// chatCall is the chat span of one provider call and what it gathers.
type chatCall struct {
	span    trace.Span
	price   *cost.Price // prices the call's usage (forever.usage.cost)
	content bool        // gather the output
	text    strings.Builder
	calls   []llm.Part
}

// startChatSpan starts the span of one provider call of step step.
func (st *turnRun) startChatSpan(ctx context.Context, step int, req llm.Request) (context.Context, *chatCall) {
	a := st.a
	model := req.Model
	if model == "" {
		model = a.modelName()
	}
	ctx, span := a.tracer.Start(ctx, tracing.OpChat+" "+model, trace.WithSpanKind(trace.SpanKindClient))
	c := &chatCall{span: span, price: a.cfg.Price}
	if !span.IsRecording() {
		return ctx, c
	}
	span.SetAttributes(
		tracing.GenAIOperationName.String(tracing.OpChat),
		tracing.GenAIProviderName.String(a.cfg.Provider.Name()),
		tracing.GenAIRequestModel.String(model),
		tracing.GenAIRequestStream.Bool(true),
		tracing.GenAIConversationID.String(a.agent),
		tracing.AgentID.String(a.agent),
		tracing.RequestID.String(st.info.RequestID),
		tracing.Step.Int(step),
	)
	if req.Continue != nil {
		span.SetAttributes(tracing.Continued.Bool(true))
	}
	if a.cfg.TraceContent {
		c.content = true
		span.SetAttributes(tracing.GenAIInputMessages.String(contentJSON(req.Messages)))
		if req.System != "" {
			b, _ := json.Marshal([]map[string]string{{"type": "text", "content": req.System}})
			span.SetAttributes(tracing.GenAISystemInstructions.String(string(b)))
		}
	}
	return ctx, c
}

// delta gathers what the call streams, for its output messages.
func (c *chatCall) delta(d llm.Delta) {
	if !c.content {
		return
	}
	switch d.Kind {
	case llm.TextDelta:
		c.text.WriteString(d.Text)
	case llm.ToolCallDone:
		c.calls = append(c.calls, llm.Part{ToolCall: &llm.ToolCall{ID: d.ToolCallID, Name: d.ToolName, Input: d.Input}})
	}
}

// end ends the call's span: its finish reason, usage and response id, or
// its error.
func (c *chatCall) end(reason string, usage *llm.Usage, responseID string, err error) {
	span := c.span
	if !span.IsRecording() {
		span.End()
		return
	}
	if responseID != "" {
		span.SetAttributes(tracing.GenAIResponseID.String(responseID))
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(tracing.ErrorType.String(errorType(err)))
	} else {
		span.SetAttributes(tracing.GenAIResponseFinish.StringSlice([]string{reason}))
	}
	if usage != nil {
		span.SetAttributes(tracing.GenAIUsageInputTokens.Int64(usage.InputTokens), tracing.GenAIUsageOutputTokens.Int64(usage.OutputTokens))
		if c.price != nil {
			span.SetAttributes(tracing.UsageCost.String(c.price.Of(usage.InputTokens, usage.OutputTokens, 0).String()))
		}
	}
	if c.content {
		m := llm.Message{Role: llm.RoleAssistant}
		if c.text.Len() > 0 {
			m.Parts = append(m.Parts, llm.Part{Text: c.text.String()})
		}
		m.Parts = append(m.Parts, c.calls...)
		span.SetAttributes(tracing.GenAIOutputMessages.String(contentJSON([]llm.Message{m}, reason)))
	}
	span.End()
}

// errorType is error.type for a failed call: the provider error's kind.
func errorType(err error) string {
	switch {
	case llm.IsRetryable(err):
		return "retryable"
	case errors.Is(err, ErrCancelled):
		return "cancelled"
	}
	return "error"
}

// startToolSpan starts the execute_tool span of call c of step step.
func (st *turnRun) startToolSpan(ctx context.Context, step int, t *Tool, c Part) (context.Context, trace.Span) {
	a := st.a
	ctx, span := a.tracer.Start(ctx, tracing.OpExecuteTool+" "+c.ToolName, trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(
			tracing.GenAIOperationName.String(tracing.OpExecuteTool),
			tracing.GenAIToolName.String(c.ToolName),
			tracing.GenAIToolCallID.String(c.ToolCallID),
			tracing.GenAIToolType.String("extension"), // run by the agent, not the client
			tracing.GenAIConversationID.String(a.agent),
			tracing.AgentID.String(a.agent),
			tracing.RequestID.String(st.info.RequestID),
			tracing.Step.Int(step),
		)
		if d := t.Def().Description; d != "" {
			span.SetAttributes(tracing.GenAIToolDescription.String(d))
		}
		if a.cfg.TraceContent {
			span.SetAttributes(tracing.GenAIToolCallArguments.String(string(c.Input)))
		}
	}
	return ctx, span
}

// endToolSpan ends a tool call's span with its outcome: on error, the
// status says the error's type, and its text too with TraceContent.
func (a *Agent) endToolSpan(span trace.Span, res toolResult, outcome string, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(tracing.ToolOutcome.String(outcome))
	// A tool's error text can quote what the user or the model gave it:
	// the status carries it only with TraceContent, its type otherwise.
	switch {
	case err != nil && a.cfg.TraceContent:
		span.SetStatus(codes.Error, err.Error())
	case err != nil:
		span.SetStatus(codes.Error, errorType(err))
	case res.Error != "":
		typ := cmp.Or(res.ErrorType, "error")
		if a.cfg.TraceContent {
			span.SetStatus(codes.Error, res.Error)
		} else {
			span.SetStatus(codes.Error, typ)
		}
		span.SetAttributes(tracing.ErrorType.String(typ))
	}
	if a.cfg.TraceContent {
		if res.Error != "" {
			span.SetAttributes(tracing.GenAIToolCallResult.String(res.Error))
		} else if len(res.Output) > 0 {
			span.SetAttributes(tracing.GenAIToolCallResult.String(string(res.Output)))
		}
	}
	span.End()
}

// toLLMMessage is one message as the provider gets it.
func toLLMMessage(m Message) llm.Message {
	if out := toLLM([]Message{m}); len(out) > 0 {
		return out[0]
	}
	return llm.Message{Role: llm.Role(m.Role)}
}

// contentJSON encodes messages as the GenAI conventions' input and output
// messages: [{"role", "parts": [{"type": "text", "content"} |
// {"type": "tool_call", "id", "name", "arguments"} | {"type":
// "tool_call_response", "id", "result"}], "finish_reason"?}]. A finish
// reason, when given, goes on each message (output messages).
func contentJSON(msgs []llm.Message, finish ...string) string {
	type part struct {
		Type      string          `json:"type"`
		Content   string          `json:"content,omitempty"`
		ID        string          `json:"id,omitempty"`
		Name      string          `json:"name,omitempty"`
		Arguments json.RawMessage `json:"arguments,omitempty"`
		Result    string          `json:"result,omitempty"`
	}
	type message struct {
		Role         string `json:"role"`
		Parts        []part `json:"parts"`
		FinishReason string `json:"finish_reason,omitempty"`
	}
	out := make([]message, 0, len(msgs))
	for _, m := range msgs {
		mm := message{Role: string(m.Role), Parts: []part{}}
		if len(finish) > 0 {
			mm.FinishReason = finish[0]
		}
		for _, p := range m.Parts {
			switch {
			case p.ToolCall != nil:
				args := p.ToolCall.Input
				if !json.Valid(args) {
					args, _ = json.Marshal(string(args))
				}
				mm.Parts = append(mm.Parts, part{Type: "tool_call", ID: p.ToolCall.ID, Name: p.ToolCall.Name, Arguments: args})
			case p.ToolResult != nil:
				mm.Parts = append(mm.Parts, part{Type: "tool_call_response", ID: p.ToolResult.CallID, Result: p.ToolResult.Output})
			default:
				mm.Parts = append(mm.Parts, part{Type: "text", Content: p.Text})
			}
		}
		out = append(out, mm)
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// failSpan ends span with err as its error.
func failSpan(span trace.Span, err error) {
	if span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
