package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/forever-agents/forever/chat/llm"
)

// ChatCompletionsConfig configures an OpenAI-compatible Chat Completions
// endpoint (OpenAI, Ollama, llama.cpp, vLLM).
type ChatCompletionsConfig struct {
	// APIKey is required for api.openai.com, where it defaults to the
	// OPENAI_API_KEY environment variable; optional elsewhere (the
	// environment is not read for other hosts, so the key never leaks to
	// them).
	APIKey string
	// BaseURL defaults to https://api.openai.com/v1; for example
	// http://localhost:11434/v1 for Ollama.
	BaseURL string
	// Model is the default model; Request.Model overrides it. Required.
	Model string
	// HTTPClient defaults to a client without timeout.
	HTTPClient *http.Client
}

// Validate reports a missing model.
func (c ChatCompletionsConfig) Validate() error {
	if c.Model == "" {
		return llm.InvalidConfig("chatcompletions", "Model is required")
	}
	return nil
}

// ChatCompletions streams from a Chat Completions endpoint: text, reasoning
// (the reasoning_content or reasoning delta field of compatible servers),
// tool call deltas and usage (stream_options.include_usage). Continuation
// sends the partial text and a ContinuePrompt. Safe for concurrent use.
type ChatCompletions struct {
	cfg ChatCompletionsConfig
	svc sdk.ChatCompletionService
}

var _ llm.Provider = (*ChatCompletions)(nil)

// NewChatCompletions returns the provider. It fails with ErrMissingAPIKey
// ("llm: chatcompletions: OPENAI_API_KEY is not set") when BaseURL is
// api.openai.com (or empty) and no key is configured or in the environment,
// and with ErrInvalidConfig when Validate fails.
func NewChatCompletions(cfg ChatCompletionsConfig) (*ChatCompletions, error) {
	if isOpenAIHost(cfg.BaseURL) {
		var err error
		if cfg.APIKey, err = openAIKey(cfg.APIKey); err != nil {
			return nil, err
		}
		if cfg.APIKey == "" {
			return nil, llm.MissingKey("chatcompletions", "OPENAI_API_KEY")
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &ChatCompletions{cfg: cfg, svc: sdk.NewChatCompletionService(openAIOptions(cfg.APIKey, cfg.BaseURL, cfg.HTTPClient)...)}, nil
}

// Name returns "chatcompletions".
func (p *ChatCompletions) Name() string { return "chatcompletions" }

// ResumesByID reports false: Chat Completions continue from the text so far.
func (p *ChatCompletions) ResumesByID() bool { return false }

// Model returns the configured model name (what a Request without Model
// asks for).
func (p *ChatCompletions) Model() string { return p.cfg.Model }

type chatCall struct {
	id, name string
	args     []byte
}

// Stream runs req. Tool calls are reported as ToolInputDelta fragments while
// they stream and as ToolCallDone deltas, in the order they started, when
// the choice finishes; a choice that finishes with "stop" after tool calls
// finishes with FinishToolCalls. The Finish delta follows the usage chunk.
func (p *ChatCompletions) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Delta, error] {
	return llm.NewStream(p.cfg.APIKey, func(s *llm.Sink) error {
		params, err := p.params(req)
		if err != nil {
			return &llm.Error{Provider: p.Name(), Err: err}
		}
		st := p.svc.NewStreaming(ctx, params, requestOptions(req)...)
		defer st.Close()
		// Calls in the order they started, and the call each index is
		// streaming. A server that leaves out "index" (it then reads as 0)
		// starts each call with a new id at the same index.
		var calls []*chatCall
		byIndex := map[int64]*chatCall{}
		var (
			finish string
			usage  *llm.Usage
			metaID string
		)
		for st.Next() {
			chunk := st.Current()
			if metaID == "" && chunk.ID != "" {
				metaID = chunk.ID
				if !s.Send(llm.Delta{Kind: llm.ResponseMeta, ResponseID: metaID}) {
					return nil
				}
			}
			if chunk.JSON.Usage.Valid() && chunk.Usage.JSON.CompletionTokens.Valid() {
				usage = &llm.Usage{InputTokens: chunk.Usage.PromptTokens, OutputTokens: chunk.Usage.CompletionTokens}
			}
			for _, ch := range chunk.Choices {
				if ch.Index != 0 {
					continue
				}
				if r := reasoningField(ch.Delta); r != "" {
					if !s.Send(llm.Delta{Kind: llm.ReasoningDelta, Text: r}) {
						return nil
					}
				}
				if ch.Delta.Content != "" {
					if !s.Send(llm.Delta{Kind: llm.TextDelta, Text: ch.Delta.Content}) {
						return nil
					}
				}
				for _, tc := range ch.Delta.ToolCalls {
					c := byIndex[tc.Index]
					if c == nil || (tc.ID != "" && c.id != "" && tc.ID != c.id) {
						c = &chatCall{}
						byIndex[tc.Index] = c
						calls = append(calls, c)
					}
					if tc.ID != "" {
						c.id = tc.ID
					}
					if tc.Function.Name != "" {
						c.name = tc.Function.Name
					}
					c.args = append(c.args, tc.Function.Arguments...)
					if tc.Function.Arguments != "" {
						if !s.Send(llm.Delta{Kind: llm.ToolInputDelta, ToolCallID: c.id, ToolName: c.name, Text: tc.Function.Arguments}) {
							return nil
						}
					}
				}
				if ch.FinishReason != "" && finish == "" {
					finish = ch.FinishReason
					if finish == llm.FinishStop && len(calls) > 0 {
						// Some compatible servers report a turn that
						// ends in tool calls as "stop".
						finish = llm.FinishToolCalls
					}
					for _, c := range calls {
						if !s.Send(llm.Delta{Kind: llm.ToolCallDone, ToolCallID: c.id, ToolName: c.name, Input: json.RawMessage(llm.RawInput(c.args))}) {
							return nil
						}
					}
				}
			}
		}
		if err := st.Err(); err != nil {
			return openAIError(ctx, p.Name(), err)
		}
		if err := llm.ContextErr(ctx); err != nil {
			return err
		}
		if finish == "" {
			return &llm.Error{Provider: p.Name(), Retryable: true, Err: llm.ErrStreamCut}
		}
		s.Send(llm.Delta{Kind: llm.Finish, FinishReason: finish, Usage: usage, ResponseID: metaID})
		return nil
	})
}

// reasoningField reads the non-standard reasoning text of compatible
// servers: reasoning_content (vLLM, llama.cpp, DeepSeek) or reasoning
// (Ollama).
func reasoningField(d sdk.ChatCompletionChunkChoiceDelta) string {
	for _, name := range []string{"reasoning_content", "reasoning"} {
		// Extra fields are never Valid (they have no declared type); read
		// the raw JSON.
		f, ok := d.JSON.ExtraFields[name]
		if !ok {
			continue
		}
		var s string
		if json.Unmarshal([]byte(f.Raw()), &s) == nil && s != "" {
			return s
		}
	}
	return ""
}

func (p *ChatCompletions) params(req llm.Request) (sdk.ChatCompletionNewParams, error) {
	params := sdk.ChatCompletionNewParams{
		Model:         shared.ChatModel(req.ModelOr(p.cfg.Model)),
		StreamOptions: sdk.ChatCompletionStreamOptionsParam{IncludeUsage: param.NewOpt(true)},
	}
	if req.MaxTokens > 0 {
		// max_tokens rather than max_completion_tokens: every compatible
		// server understands it.
		params.MaxTokens = param.NewOpt(int64(req.MaxTokens))
	}
	if req.System != "" {
		params.Messages = append(params.Messages, sdk.SystemMessage(req.System))
	}
	for _, m := range req.Input() {
		switch m.Role {
		case llm.RoleUser:
			params.Messages = append(params.Messages, sdk.UserMessage(m.PlainText()))
		case llm.RoleAssistant:
			var a sdk.ChatCompletionAssistantMessageParam
			if t := m.PlainText(); t != "" {
				a.Content.OfString = param.NewOpt(t)
			}
			for _, part := range m.Parts {
				if tc := part.ToolCall; tc != nil {
					a.ToolCalls = append(a.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{
						OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
							ID:       tc.ID,
							Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: llm.SentInput(tc.Input)},
						},
					})
				}
			}
			params.Messages = append(params.Messages, sdk.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case llm.RoleTool:
			for _, part := range m.Parts {
				if tr := part.ToolResult; tr != nil {
					params.Messages = append(params.Messages, sdk.ToolMessage(tr.Output, tr.CallID))
				}
			}
		default:
			return params, fmt.Errorf("unknown role %q", m.Role)
		}
	}
	for _, t := range req.Tools {
		schema, err := t.SchemaMap()
		if err != nil {
			return params, fmt.Errorf("tool %q schema: %w", t.Name, err)
		}
		fd := shared.FunctionDefinitionParam{Name: t.Name, Parameters: shared.FunctionParameters(schema)}
		if t.Description != "" {
			fd.Description = param.NewOpt(t.Description)
		}
		params.Tools = append(params.Tools, sdk.ChatCompletionFunctionTool(fd))
	}
	return params, nil
}

// ContextTokens returns llm.DefaultOpenAIContextTokens: the context budget
// a chat agent on this provider has unless it sets its own.
func (p *ChatCompletions) ContextTokens() int { return llm.DefaultOpenAIContextTokens }
