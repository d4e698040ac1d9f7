package llm

import (
	"fmt"
	"strings"
)

// isSummaryRequest reports whether msgs ask for a summary: the last
// message is the user message SummarizePrompt.
func isSummaryRequest(msgs []Message) bool {
	n := len(msgs)
	return n > 0 && msgs[n-1].Role == RoleUser && msgs[n-1].PlainText() == SummarizePrompt
}

// LocalSummary is the Local model's answer to a summary request of msgs
// (the messages before SummarizePrompt): a fixed format naming how many
// messages it was given and the first words of the first and the last,
//
//	Summary of 12 messages, from "first words of the first" to "first words of the last".
//
// so that tests see exactly what a summary covered.
func LocalSummary(msgs []Message) string {
	if len(msgs) == 0 {
		return "Summary of 0 messages."
	}
	first := firstWords(msgs[0].PlainText(), 6)
	last := firstWords(msgs[len(msgs)-1].PlainText(), 6)
	return fmt.Sprintf("Summary of %d messages, from %q to %q.", len(msgs), first, last)
}

func firstWords(s string, n int) string {
	w := strings.Fields(s)
	return strings.Join(w[:min(len(w), n)], " ")
}
