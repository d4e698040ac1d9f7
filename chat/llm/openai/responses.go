package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"

	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/forever-agents/forever/chat/llm"
)

// ResponsesConfig configures the OpenAI Responses API provider.
type ResponsesConfig struct {
	// APIKey defaults to the OPENAI_API_KEY environment variable.
	APIKey string
	// BaseURL defaults to https://api.openai.com/v1.
	BaseURL string
	// Model is the default model; Request.Model overrides it. Required.
	Model string
	// Background creates responses with background=true (and store=true), so
	// an interrupted stream can be resumed from its last sequence number.
	Background bool
	// HTTPClient defaults to a client without timeout (streams are long).
	HTTPClient *http.Client
}

// Validate reports a missing model.
func (c ResponsesConfig) Validate() error {
	if c.Model == "" {
		return llm.InvalidConfig("openai", "Model is required")
	}
	return nil
}

// Responses streams from the OpenAI Responses API. Every delta
// carries the response id and the event's sequence number; the first is a
// ResponseMeta delta from response.created. Safe for concurrent use.
type Responses struct {
	cfg ResponsesConfig
	svc responses.ResponseService
}

var _ llm.Provider = (*Responses)(nil)

// NewResponses returns the provider. It fails with ErrMissingAPIKey
// ("llm: openai: OPENAI_API_KEY is not set") when no key is configured or in
// the environment, and with ErrInvalidConfig when Validate fails.
func NewResponses(cfg ResponsesConfig) (*Responses, error) {
	var err error
	if cfg.APIKey, err = openAIKey(cfg.APIKey); err != nil {
		return nil, err
	}
	if cfg.APIKey == "" {
		return nil, llm.MissingKey("openai", "OPENAI_API_KEY")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Responses{cfg: cfg, svc: responses.NewResponseService(openAIOptions(cfg.APIKey, cfg.BaseURL, cfg.HTTPClient)...)}, nil
}

// Name returns "openai".
func (p *Responses) Name() string { return "openai" }

// ResumesByID reports true: the Responses API retrieves a response by its id.
func (p *Responses) ResumesByID() bool { return true }

// Model returns the configured model name (what a Request without Model
// asks for).
func (p *Responses) Model() string { return p.cfg.Model }

// Stream creates a response and streams it. With req.Continue.ResponseID it
// recovers that response instead (see Continuation): a background response
// still running is streamed again from after Continue.SequenceNumber; a
// finished or non-background one is retrieved and its text beyond
// Continue.PartialText is yielded, followed by its function calls as
// ToolCallDone deltas (callers dedupe by ToolCallID). Without ResponseID but
// with PartialText, a new response is asked to continue the partial text.
func (p *Responses) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Delta, error] {
	return llm.NewStream(p.cfg.APIKey, func(s *llm.Sink) error {
		if c := req.Continue; c != nil && c.ResponseID != "" {
			return p.recover(ctx, req, s)
		}
		params, err := p.params(req)
		if err != nil {
			return &llm.Error{Provider: p.Name(), Err: err}
		}
		st := p.svc.NewStreaming(ctx, params, requestOptions(req)...)
		return p.consume(ctx, st, s, "", nil)
	})
}

func (p *Responses) params(req llm.Request) (responses.ResponseNewParams, error) {
	params := responses.ResponseNewParams{
		Model: shared.ResponsesModel(req.ModelOr(p.cfg.Model)),
	}
	if req.System != "" {
		params.Instructions = param.NewOpt(req.System)
	}
	if req.MaxTokens > 0 {
		params.MaxOutputTokens = param.NewOpt(int64(req.MaxTokens))
	}
	if p.cfg.Background {
		params.Background = param.NewOpt(true)
		params.Store = param.NewOpt(true)
	}
	var input responses.ResponseInputParam
	for _, m := range req.Input() {
		for _, part := range m.Parts {
			switch {
			case part.ToolCall != nil:
				input = append(input, responses.ResponseInputItemParamOfFunctionCall(llm.SentInput(part.ToolCall.Input), part.ToolCall.ID, part.ToolCall.Name))
			case part.ToolResult != nil:
				item := responses.ResponseInputItemParamOfFunctionCallOutput(part.ToolResult.Output)
				item.OfFunctionCallOutput.CallID = param.NewOpt(part.ToolResult.CallID)
				input = append(input, item)
			case part.Text != "":
				role := responses.EasyInputMessageRoleUser
				if m.Role == llm.RoleAssistant {
					role = responses.EasyInputMessageRoleAssistant
				}
				input = append(input, responses.ResponseInputItemParamOfMessage(part.Text, role))
			}
		}
	}
	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: input}
	for _, t := range req.Tools {
		schema, err := t.SchemaMap()
		if err != nil {
			return params, fmt.Errorf("tool %q schema: %w", t.Name, err)
		}
		tool := responses.ToolParamOfFunction(t.Name, schema, false)
		if t.Description != "" {
			tool.OfFunction.Description = param.NewOpt(t.Description)
		}
		params.Tools = append(params.Tools, tool)
	}
	return params, nil
}

type responsesCall struct{ callID, name string }

// consume turns Responses stream events into deltas. responseID is known
// when resuming; otherwise response.created supplies it. calls holds the
// function calls already started, by output item id, when resuming (their
// output_item.added events are not streamed again); consume adds to it.
func (p *Responses) consume(ctx context.Context, st *ssestream.Stream[responses.ResponseStreamEventUnion], s *llm.Sink, responseID string, calls map[string]responsesCall) error {
	defer st.Close()
	if calls == nil {
		calls = map[string]responsesCall{}
	}
	sawCall := false
	for st.Next() {
		ev := st.Current()
		d := llm.Delta{ResponseID: responseID, SequenceNumber: ev.SequenceNumber}
		switch ev.Type {
		case "response.created":
			responseID = ev.Response.ID
			d.ResponseID = responseID
			d.Kind = llm.ResponseMeta
		case "response.output_text.delta":
			d.Kind, d.Text = llm.TextDelta, ev.Delta
		case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
			d.Kind, d.Text = llm.ReasoningDelta, ev.Delta
		case "response.output_item.added":
			if ev.Item.Type == "function_call" {
				calls[ev.Item.ID] = responsesCall{callID: ev.Item.CallID, name: ev.Item.Name}
			}
			continue
		case "response.function_call_arguments.delta":
			c := calls[ev.ItemID]
			d.Kind, d.ToolCallID, d.ToolName, d.Text = llm.ToolInputDelta, c.callID, c.name, ev.Delta
		case "response.output_item.done":
			if ev.Item.Type != "function_call" {
				continue
			}
			sawCall = true
			d.Kind, d.ToolCallID, d.ToolName = llm.ToolCallDone, ev.Item.CallID, ev.Item.Name
			d.Input = json.RawMessage(llm.RawInput(json.RawMessage(ev.Item.Arguments.OfString)))
		case "response.completed", "response.incomplete":
			d.Kind = llm.Finish
			d.FinishReason = responseFinishReason(ev.Response, sawCall)
			d.Usage = &llm.Usage{InputTokens: ev.Response.Usage.InputTokens, OutputTokens: ev.Response.Usage.OutputTokens}
			s.Send(d)
			return nil
		case "response.failed":
			code := string(ev.Response.Error.Code)
			return &llm.Error{Provider: p.Name(), Retryable: retryableOpenAICode(code), Code: code,
				Err: fmt.Errorf("response %s failed: %s", responseID, ev.Response.Error.Message)}
		case "error":
			return &llm.Error{Provider: p.Name(), Retryable: retryableOpenAICode(ev.Code), Code: ev.Code,
				Err: fmt.Errorf("error event at sequence %d: %s", ev.SequenceNumber, ev.Message)}
		default:
			continue
		}
		if !s.Send(d) {
			return nil
		}
	}
	if err := st.Err(); err != nil {
		return openAIError(ctx, p.Name(), err)
	}
	if err := llm.ContextErr(ctx); err != nil {
		return err
	}
	return &llm.Error{Provider: p.Name(), Retryable: true, Err: llm.ErrStreamCut}
}

// responseFinishReason maps a finished response to a finish reason.
func responseFinishReason(r responses.Response, sawCall bool) string {
	if r.Status == responses.ResponseStatusIncomplete {
		if r.IncompleteDetails.Reason == "max_output_tokens" {
			return llm.FinishLength
		}
		if r.IncompleteDetails.Reason != "" {
			return r.IncompleteDetails.Reason
		}
		return string(r.Status)
	}
	for _, item := range r.Output {
		if item.Type == "function_call" {
			sawCall = true
		}
	}
	if sawCall {
		return llm.FinishToolCalls
	}
	return llm.FinishStop
}

// ContextTokens returns llm.DefaultOpenAIContextTokens: the context budget
// a chat agent on this provider has unless it sets its own.
func (p *Responses) ContextTokens() int { return llm.DefaultOpenAIContextTokens }
