package chat_test

import (
	"net/http"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm/llmtest"
	"github.com/forever-agents/forever/chat/llm/openai"
)

// TestProviderIdempotencyKey: every provider call of a turn carries an
// Idempotency-Key derived from the turn and its step. A call retried with
// nothing new in the stream carries the same key (the provider collapses
// it, so it is not billed twice); a continuation after progress, and
// another turn, get new keys.
func TestProviderIdempotencyKey(t *testing.T) {
	var n int
	srv := llmtest.NewServer(t, func(llmtest.Request) llmtest.Reply {
		n++
		switch n {
		case 1: // turn 1: a retryable failure before anything streamed
			return llmtest.OpenAIError(http.StatusServiceUnavailable, "server_error", "overloaded", "try again")
		case 2:
			return llmtest.Stream(llmtest.NewChat("c1", "m").Text("Hello", " there").Finish("stop").Done().Events())
		case 3: // turn 2: cut after some text
			return llmtest.Stream(llmtest.NewChat("c2", "m").Text("Once", " upon").Cut().Events())
		default:
			return llmtest.Stream(llmtest.NewChat("c3", "m").Text(" a time").Finish("stop").Done().Events())
		}
	})
	p, err := openai.NewChatCompletions(openai.ChatCompletionsConfig{BaseURL: srv.URL + "/v1", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	h := e.host(t, "a1", p, nil)
	t1, err := h.a.Send(t.Context(), chat.SendRequest{Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	t2, err := h.a.Send(t.Context(), chat.SendRequest{Text: "a story"})
	if err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnCompleted {
		t.Fatalf("turn 2 = %+v", tr)
	}
	reqs := srv.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d provider requests, want 4", len(reqs))
	}
	keys := make([]string, len(reqs))
	for i, r := range reqs {
		keys[i] = r.Header.Get("Idempotency-Key")
		if keys[i] == "" {
			t.Fatalf("request %d has no Idempotency-Key", i)
		}
	}
	if keys[0] != keys[1] {
		t.Errorf("a retry without progress changed the key: %q then %q", keys[0], keys[1])
	}
	// The first call follows two chunks: start and start-step.
	if keys[0] != chat.IdempotencyKey(t1.RequestID, 2) {
		t.Errorf("key %q is not derived from the turn and its step", keys[0])
	}
	if keys[2] == keys[0] || keys[2] != chat.IdempotencyKey(t2.RequestID, 2) {
		t.Errorf("turn 2's first call has key %q", keys[2])
	}
	if keys[3] == keys[2] {
		t.Errorf("a continuation after progress reused the key %q", keys[3])
	}
}
