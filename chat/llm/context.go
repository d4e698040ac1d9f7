package llm

// Context budgets: how much of a conversation a model is given.
//
// A chat agent keeps its conversation whole, but gives the model only what
// fits its context budget (chat.Config.ContextTokens): the system prompt,
// a summary of the older messages and the newest messages that fit. The
// summary is asked of the same provider with SummarizePrompt.

// Default context budgets, in tokens, of the built-in providers: below
// their models' context windows, leaving room for the answer and the
// turn's own steps.
const (
	DefaultOpenAIContextTokens    = 100_000
	DefaultAnthropicContextTokens = 150_000
)

// ContextBudgeter is implemented by a provider that knows a sensible
// context budget for its model, in tokens.
type ContextBudgeter interface {
	ContextTokens() int
}

// ContextTokensOf returns p's default context budget in tokens, 0 when p
// names none (the whole conversation is sent).
func ContextTokensOf(p Provider) int {
	if b, ok := p.(ContextBudgeter); ok {
		return b.ContextTokens()
	}
	return 0
}

// SummarizePrompt is the last user message of a summary request: the
// messages before it are what to summarise. The Local model answers it
// with LocalSummary.
const SummarizePrompt = "Summarize the conversation above for your own later use: keep the facts, names, decisions, open questions and anything the user asked you to remember. Answer with the summary only."

// EstimateTokens estimates the tokens of text as its length in bytes over
// four (rounded up), the usual rule of thumb for English text with the
// common tokenizers; a provider's own count is not asked for.
func EstimateTokens(text string) int { return (len(text) + 3) / 4 }
