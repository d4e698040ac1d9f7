package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/forever-agents/forever/chat/llm"
)

// DefaultMaxTokens is the output cap when neither
// Config.MaxTokens nor Request.MaxTokens is set (the Messages API
// requires one).
const DefaultMaxTokens = 4096

// Config configures the Anthropic Messages API provider.
type Config struct {
	// APIKey defaults to the ANTHROPIC_API_KEY environment variable.
	APIKey string
	// BaseURL defaults to https://api.anthropic.com.
	BaseURL string
	// Model is the default model; Request.Model overrides it. Required.
	Model string
	// MaxTokens is the default output cap; 0 means DefaultMaxTokens.
	MaxTokens int
	// ThinkingBudget enables extended thinking with this many budget tokens
	// (at least 1024, below the max tokens); 0 disables it.
	ThinkingBudget int
	// HTTPClient defaults to a client without timeout.
	HTTPClient *http.Client
}

// Validate reports a missing model or a bad thinking budget.
func (c Config) Validate() error {
	if c.Model == "" {
		return llm.InvalidConfig("anthropic", "Model is required")
	}
	if c.MaxTokens < 0 {
		return llm.InvalidConfig("anthropic", "MaxTokens %d is negative", c.MaxTokens)
	}
	if c.ThinkingBudget != 0 && c.ThinkingBudget < 1024 {
		return llm.InvalidConfig("anthropic", "ThinkingBudget %d is below 1024", c.ThinkingBudget)
	}
	return nil
}

// Anthropic streams from the Anthropic Messages API: text, thinking
// (ReasoningDelta), tool_use input JSON, usage. A Continuation with
// PartialText appends the partial answer as an assistant message and a user
// ContinuePrompt, since current models reject assistant prefill. Safe for
// concurrent use.
type Provider struct {
	cfg Config
	svc sdk.MessageService
}

var _ llm.Provider = (*Provider)(nil)

// New returns the provider. It fails with ErrMissingAPIKey
// ("llm: anthropic: ANTHROPIC_API_KEY is not set") when no key is configured
// or in the environment, and with ErrInvalidConfig when Validate fails.
func New(cfg Config) (*Provider, error) {
	if cfg.APIKey == "" {
		var err error
		if cfg.APIKey, err = llm.EnvSecret("ANTHROPIC_API_KEY"); err != nil {
			return nil, err
		}
	}
	if cfg.APIKey == "" {
		return nil, llm.MissingKey("anthropic", "ANTHROPIC_API_KEY")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = DefaultMaxTokens
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	// Built without anthropic.NewClient so nothing is read from the
	// environment besides the key above; SDK retries are off because the
	// chat layer owns retries.
	opts := []option.RequestOption{
		option.WithHTTPClient(hc),
		option.WithEnvironmentProduction(),
		option.WithMaxRetries(0),
		option.WithAPIKey(cfg.APIKey),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	return &Provider{cfg: cfg, svc: sdk.NewMessageService(opts...)}, nil
}

// Name returns "anthropic".
func (p *Provider) Name() string { return "anthropic" }

// ResumesByID reports false: Anthropic continues from the text so far.
func (p *Provider) ResumesByID() bool { return false }

// Model returns the configured model name (what a Request without Model
// asks for).
func (p *Provider) Model() string { return p.cfg.Model }

type anthropicBlock struct {
	toolUse  bool
	id, name string
	input    []byte
}

// Stream runs req. The first delta is a ResponseMeta with the message id; a
// tool_use block yields ToolInputDelta fragments and a ToolCallDone at its
// content_block_stop; message_stop yields Finish with the usage from
// message_start and message_delta.
func (p *Provider) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Delta, error] {
	return llm.NewStream(p.cfg.APIKey, func(s *llm.Sink) error {
		params, err := p.params(req)
		if err != nil {
			return &llm.Error{Provider: p.Name(), Err: err}
		}
		var opts []option.RequestOption
		if req.IdempotencyKey != "" {
			opts = append(opts, option.WithHeader("Idempotency-Key", req.IdempotencyKey))
		}
		st := p.svc.NewStreaming(ctx, params, opts...)
		defer st.Close()
		blocks := map[int64]*anthropicBlock{}
		var (
			usage  llm.Usage
			reason string
			id     string
		)
		for st.Next() {
			ev := st.Current()
			var d llm.Delta
			switch ev.Type {
			case "message_start":
				id = ev.Message.ID
				usage.InputTokens = ev.Message.Usage.InputTokens + ev.Message.Usage.CacheReadInputTokens + ev.Message.Usage.CacheCreationInputTokens
				usage.OutputTokens = ev.Message.Usage.OutputTokens
				d = llm.Delta{Kind: llm.ResponseMeta, ResponseID: id}
			case "content_block_start":
				b := &anthropicBlock{}
				if ev.ContentBlock.Type == "tool_use" {
					b.toolUse, b.id, b.name = true, ev.ContentBlock.ID, ev.ContentBlock.Name
				}
				blocks[ev.Index] = b
				continue
			case "content_block_delta":
				switch ev.Delta.Type {
				case "text_delta":
					d = llm.Delta{Kind: llm.TextDelta, Text: ev.Delta.Text}
				case "thinking_delta":
					d = llm.Delta{Kind: llm.ReasoningDelta, Text: ev.Delta.Thinking}
				case "input_json_delta":
					b := blocks[ev.Index]
					if b == nil || ev.Delta.PartialJSON == "" {
						continue // the API may open the input with an empty fragment
					}
					b.input = append(b.input, ev.Delta.PartialJSON...)
					d = llm.Delta{Kind: llm.ToolInputDelta, ToolCallID: b.id, ToolName: b.name, Text: ev.Delta.PartialJSON}
				default:
					continue
				}
			case "content_block_stop":
				b := blocks[ev.Index]
				if b == nil || !b.toolUse {
					continue
				}
				d = llm.Delta{Kind: llm.ToolCallDone, ToolCallID: b.id, ToolName: b.name, Input: json.RawMessage(llm.RawInput(b.input))}
			case "message_delta":
				reason = anthropicFinishReason(string(ev.Delta.StopReason))
				if ev.Usage.OutputTokens > 0 {
					usage.OutputTokens = ev.Usage.OutputTokens
				}
				if in := ev.Usage.InputTokens + ev.Usage.CacheReadInputTokens + ev.Usage.CacheCreationInputTokens; in > 0 {
					usage.InputTokens = in
				}
				continue
			case "message_stop":
				u := usage
				s.Send(llm.Delta{Kind: llm.Finish, FinishReason: reason, Usage: &u, ResponseID: id})
				return nil
			default:
				continue
			}
			if !s.Send(d) {
				return nil
			}
		}
		if err := st.Err(); err != nil {
			return p.classify(ctx, err)
		}
		if err := llm.ContextErr(ctx); err != nil {
			return err
		}
		return &llm.Error{Provider: p.Name(), Retryable: true, Err: llm.ErrStreamCut}
	})
}

// classify turns an SDK error into an *Error. An error event inside the
// stream arrives as an *anthropic.Error with the 200 status of the stream
// and the error type from its body.
func (p *Provider) classify(ctx context.Context, err error) error {
	if cerr := llm.ContextErr(ctx); cerr != nil {
		return cerr
	}
	var apiErr *sdk.Error
	if !errors.As(err, &apiErr) {
		return &llm.Error{Provider: p.Name(), Retryable: true, Err: err}
	}
	status := apiErr.StatusCode
	if status == http.StatusOK {
		status = 0
	}
	typ := apiErr.Type()
	retry := llm.RetryableStatus(status)
	switch typ {
	case sdk.ErrorTypeRateLimitError, sdk.ErrorTypeOverloadedError,
		sdk.ErrorTypeAPIError, sdk.ErrorTypeTimeoutError:
		retry = true
	case sdk.ErrorTypeInvalidRequestError, sdk.ErrorTypeAuthenticationError,
		sdk.ErrorTypePermissionError, sdk.ErrorTypeNotFoundError,
		sdk.ErrorTypeBillingError:
		retry = false
	}
	e := &llm.Error{Provider: p.Name(), Retryable: retry, Status: status, Code: string(typ), Err: err}
	if apiErr.Response != nil {
		e.RetryAfter = llm.ParseRetryAfter(apiErr.Response.Header, time.Now())
	}
	return e
}

func anthropicFinishReason(r string) string {
	switch r {
	case "end_turn", "stop_sequence":
		return llm.FinishStop
	case "tool_use":
		return llm.FinishToolCalls
	case "max_tokens":
		return llm.FinishLength
	}
	return r
}

func (p *Provider) params(req llm.Request) (sdk.MessageNewParams, error) {
	maxTokens := p.cfg.MaxTokens
	if req.MaxTokens > 0 {
		maxTokens = req.MaxTokens
	}
	params := sdk.MessageNewParams{
		Model:     sdk.Model(req.ModelOr(p.cfg.Model)),
		MaxTokens: int64(maxTokens),
	}
	if req.System != "" {
		params.System = []sdk.TextBlockParam{{Text: req.System}}
	}
	if p.cfg.ThinkingBudget > 0 {
		params.Thinking = sdk.ThinkingConfigParamOfEnabled(int64(p.cfg.ThinkingBudget))
	}
	for _, m := range req.Input() {
		var blocks []sdk.ContentBlockParamUnion
		for _, part := range m.Parts {
			switch {
			case part.ToolCall != nil:
				blocks = append(blocks, sdk.NewToolUseBlock(part.ToolCall.ID, json.RawMessage(llm.SentInput(part.ToolCall.Input)), part.ToolCall.Name))
			case part.ToolResult != nil:
				blocks = append(blocks, sdk.NewToolResultBlock(part.ToolResult.CallID, part.ToolResult.Output, part.ToolResult.IsError))
			case part.Text != "":
				blocks = append(blocks, sdk.NewTextBlock(part.Text))
			}
		}
		if len(blocks) == 0 {
			continue
		}
		switch m.Role {
		case llm.RoleUser, llm.RoleTool: // tool results travel in user messages
			params.Messages = append(params.Messages, sdk.NewUserMessage(blocks...))
		case llm.RoleAssistant:
			params.Messages = append(params.Messages, sdk.NewAssistantMessage(blocks...))
		default:
			return params, fmt.Errorf("unknown role %q", m.Role)
		}
	}
	for _, t := range req.Tools {
		schema, err := t.SchemaMap()
		if err != nil {
			return params, fmt.Errorf("tool %q schema: %w", t.Name, err)
		}
		in := sdk.ToolInputSchemaParam{ExtraFields: map[string]any{}}
		for k, v := range schema {
			switch k {
			case "type":
			case "properties":
				in.Properties = v
			case "required":
				if req, ok := v.([]any); ok {
					for _, r := range req {
						if s, ok := r.(string); ok {
							in.Required = append(in.Required, s)
						}
					}
				}
			default:
				in.ExtraFields[k] = v
			}
		}
		tool := sdk.ToolParam{Name: t.Name, InputSchema: in}
		if t.Description != "" {
			tool.Description = sdk.String(t.Description)
		}
		params.Tools = append(params.Tools, sdk.ToolUnionParam{OfTool: &tool})
	}
	return params, nil
}

// ContextTokens returns llm.DefaultAnthropicContextTokens: the context
// budget a chat agent on this provider has unless it sets its own.
func (p *Provider) ContextTokens() int { return llm.DefaultAnthropicContextTokens }
