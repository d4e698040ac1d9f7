package chat

import (
	"encoding/json"

	"github.com/forever-agents/forever/chat/llm"
)

// The context a model call is given (see Config.ContextTokens). The stored
// conversation stays whole; what the model reads of it is decided here, as
// pure functions of the conversation, the stored summary and the budget,
// and carried out by modelInput (summary.go).
//
// While the conversation and the system prompt fit the budget, the model
// gets them whole. Past it, the model gets the system prompt, a summary of
// the messages up to some message (context.summarized {upto}), and the
// newest messages after it that fit. A stored summary is reused until the
// messages after it exceed half the budget; then a new one is made, of the
// old summary and the messages after it up to where the newest messages
// within a quarter of the budget begin.

// summaryHeader introduces the summary in the system prompt of a model
// call that does not get the whole conversation.
const summaryHeader = "Summary of the earlier conversation (its older messages are not shown):\n"

// messageTokens estimates the tokens of m as the model reads it: its
// parts as JSON, at llm.EstimateTokens' four bytes a token.
func messageTokens(m Message) int {
	raw, err := json.Marshal(m.Parts)
	if err != nil {
		return 0
	}
	return llm.EstimateTokens(string(raw)) + 4 // and its role and framing
}

// contextPlan is what modelInput does for one model call.
type contextPlan struct {
	// whole: send the conversation as it is, no summary.
	whole bool
	// covered is the number of messages the stored summary covers (0
	// without one, or when its message is no longer in the conversation).
	covered int
	// cut, when above covered, asks for a new summary of the stored one
	// and msgs[covered:cut], covering msgs[:cut].
	cut int
}

// planContext decides a model call's context: msgs is the conversation
// (without the turn's own assistant message), system the system prompt's
// tokens, budget the agent's context budget (0 or less: no limit), and
// upto the message id the stored summary covers ("" for none).
func planContext(budget, system int, tokens []int, msgs []Message, upto string) contextPlan {
	if budget <= 0 || len(msgs) == 0 {
		return contextPlan{whole: true}
	}
	total := system
	for _, t := range tokens {
		total += t
	}
	if total <= budget {
		return contextPlan{whole: true}
	}
	p := contextPlan{}
	if upto != "" {
		for i, m := range msgs {
			if m.ID == upto {
				p.covered = i + 1
				break
			}
		}
	}
	after := 0
	for _, t := range tokens[p.covered:] {
		after += t
	}
	if p.covered > 0 && after <= budget/2 {
		return p // the stored summary is reused
	}
	// A new summary: keep the newest messages within a quarter of the
	// budget (at least the last), starting at a user message.
	k := len(msgs) - 1
	for sum := tokens[k]; k > p.covered && sum+tokens[k-1] <= budget/4; k-- {
		sum += tokens[k-1]
	}
	if k = alignUser(msgs, k); k > p.covered {
		p.cut = k
	}
	return p
}

// fitFrom returns where the messages sent after a summary begin: the
// newest messages from start on whose tokens, with used (the system
// prompt's and the summary's), fit budget; at least the last message, and
// the first one a user message when one is left.
func fitFrom(budget, used int, tokens []int, msgs []Message, start int) int {
	if start >= len(msgs) {
		return len(msgs)
	}
	k := len(msgs) - 1
	for sum := used + tokens[k]; k > start && sum+tokens[k-1] <= budget; k-- {
		sum += tokens[k-1]
	}
	return alignUser(msgs, k)
}

// alignUser moves k forward to the next user message, so that what the
// model reads after the summary starts as a conversation does; k when
// there is none.
func alignUser(msgs []Message, k int) int {
	for i := k; i < len(msgs); i++ {
		if msgs[i].Role == RoleUser {
			return i
		}
	}
	return k
}

// withSummary is the system prompt of a call given the summary text.
func withSummary(system, text string) string {
	if system == "" {
		return summaryHeader + text
	}
	return system + "\n\n" + summaryHeader + text
}
