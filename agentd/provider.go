package agentd

import (
	"fmt"

	"github.com/forever-agents/forever/chat/llm"
)

// NewProvider builds the chat model provider cfg names. A remote provider
// without its API key or model is an error naming what is missing.
func NewProvider(cfg Config) (llm.Provider, error) {
	var (
		p   llm.Provider
		err error
	)
	switch cfg.Provider {
	case ProviderLocal, "":
		return llm.NewLocal(llm.LocalConfig{Rate: cfg.LocalRate}), nil
	case ProviderOpenAI:
		p, err = llm.NewOpenAIResponses(llm.OpenAIResponsesConfig{BaseURL: cfg.ProviderURL, Model: cfg.Model})
	case ProviderChatCompletions:
		p, err = llm.NewChatCompletions(llm.ChatCompletionsConfig{BaseURL: cfg.ProviderURL, Model: cfg.Model})
	case ProviderAnthropic:
		p, err = llm.NewAnthropic(llm.AnthropicConfig{BaseURL: cfg.ProviderURL, Model: cfg.Model})
	default:
		return nil, configErrorf("provider", "provider %q is not one of local, openai, chatcompletions, anthropic", cfg.Provider)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: provider %s (--provider, --model, --provider-url): %w", ErrConfig, cfg.Provider, err)
	}
	return p, nil
}
