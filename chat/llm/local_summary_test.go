package llm_test

import (
	"testing"

	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/chat/llm/llmtest"
)

// TestLocalSummary: the local model answers a summary request (the last
// user message is llm.SummarizePrompt) with a fixed-format summary of the
// messages before it, and streams it like any answer.
func TestLocalSummary(t *testing.T) {
	msgs := []llm.Message{
		llm.Text(llm.RoleUser, "my name is Ada and I like lighthouses very much"),
		llm.Text(llm.RoleAssistant, "Noted."),
		llm.Text(llm.RoleUser, "what is my name again, do you remember"),
	}
	req := llm.Request{Messages: append(msgs, llm.Text(llm.RoleUser, llm.SummarizePrompt))}
	want := `Summary of 3 messages, from "my name is Ada and I" to "what is my name again, do".`
	if got := llm.LocalSummary(msgs); got != want {
		t.Fatalf("LocalSummary = %q, want %q", got, want)
	}
	if got := fastLocal().Answer(req); got != want {
		t.Errorf("Answer = %q, want %q", got, want)
	}
	if got := llmtest.Collect(t, t.Context(), fastLocal(), req).Text; got != want {
		t.Errorf("streamed %q, want %q", got, want)
	}
	if got := llm.ContextTokensOf(fastLocal()); got != 0 {
		t.Errorf("local context budget %d, want 0 (none)", got)
	}
}
