package main

import (
	"fmt"
	"math"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/chat/llm/anthropic"
	"github.com/forever-agents/forever/chat/llm/openai"
)

// newProvider builds the chat model provider cfg names. The vendor SDKs are
// compiled here, in the binary, and nowhere below it: the library packages
// take an llm.Provider. A remote provider without its API key or model is
// an error naming what is missing.
func newProvider(cfg agentd.Config) (llm.Provider, error) {
	var (
		p   llm.Provider
		err error
	)
	switch cfg.Provider {
	case agentd.ProviderLocal, "":
		if r := cfg.LocalModelLimit; r.N != math.Trunc(r.N) {
			return nil, agentd.ConfigErrorf("local-model-limit", "--local-model-limit %s: give a whole number of calls per period, such as 5/s or 1/2s", r)
		}
		return llm.NewLocal(llm.LocalConfig{Rate: cfg.LocalRate,
			Limit: llm.LocalLimit{Calls: int(cfg.LocalModelLimit.N), Per: cfg.LocalModelLimit.Per}}), nil
	case agentd.ProviderOpenAI:
		p, err = openai.NewResponses(openai.ResponsesConfig{BaseURL: cfg.ProviderURL, Model: cfg.Model})
	case agentd.ProviderChatCompletions:
		p, err = openai.NewChatCompletions(openai.ChatCompletionsConfig{BaseURL: cfg.ProviderURL, Model: cfg.Model})
	case agentd.ProviderAnthropic:
		p, err = anthropic.New(anthropic.Config{BaseURL: cfg.ProviderURL, Model: cfg.Model})
	default:
		return nil, agentd.ConfigErrorf("provider", "provider %q is not one of local, openai, chatcompletions, anthropic", cfg.Provider)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: provider %s (--provider, --model, --provider-url): %w", agentd.ErrConfig, cfg.Provider, err)
	}
	return p, nil
}
