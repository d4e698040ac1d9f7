package llm_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/chat/llm/llmtest"
)

// A key can come from the file named by <VAR>_FILE (Docker and Kubernetes
// secrets); an unreadable file is a config error naming the variable.
func TestKeyFromFile(t *testing.T) {
	srv := llmtest.NewServer(t, func(llmtest.Request) llmtest.Reply {
		return llmtest.Stream(llmtest.NewAnthropic("m1", "claude", 3).Text("ok").Stop("end_turn", 1).Events())
	})
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, []byte("ak-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ANTHROPIC_API_KEY", "")
	t.Setenv("ANTHROPIC_API_KEY_FILE", path)
	p, err := llm.NewAnthropic(llm.AnthropicConfig{BaseURL: srv.URL, Model: "claude"})
	if err != nil {
		t.Fatal(err)
	}
	if r := collect(t, t.Context(), p, userReq("x")); r.err != nil {
		t.Fatal(r.err)
	}
	if got := srv.Requests()[0].Header.Get("X-Api-Key"); got != "ak-from-file" {
		t.Fatalf("key sent = %q, want the file's, trimmed", got)
	}

	t.Setenv("ANTHROPIC_API_KEY_FILE", filepath.Join(t.TempDir(), "missing"))
	_, err = llm.NewAnthropic(llm.AnthropicConfig{BaseURL: srv.URL, Model: "claude"})
	if !errors.Is(err, llm.ErrInvalidConfig) || !strings.Contains(err.Error(), "ANTHROPIC_API_KEY_FILE") {
		t.Fatalf("missing key file: %v", err)
	}
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_API_KEY_FILE", path)
	if _, err := llm.NewChatCompletions(llm.ChatCompletionsConfig{Model: "gpt"}); err != nil {
		t.Fatalf("OpenAI key from file: %v", err)
	}
}

// A provider that echoes the key it was sent does not get it into the
// error a stream ends with (which becomes a chat's error chunk and a log
// line): it is redacted, and the error keeps its type and status.
func TestKeyRedactedFromErrors(t *testing.T) {
	const key = "sk-secret-0123456789abcdef"
	srv := llmtest.NewServer(t, func(llmtest.Request) llmtest.Reply {
		return llmtest.Stream(llmtest.NewChat("c", "m").Text("pa").Error("invalid_request_error", "invalid_api_key", "Incorrect API key provided: "+key+".").Events())
	})
	p, err := llm.NewChatCompletions(llm.ChatCompletionsConfig{APIKey: key, BaseURL: srv.URL + "/v1", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	r := collect(t, t.Context(), p, userReq("x"))
	var e *llm.Error
	if !errors.As(r.err, &e) || e.Provider != "chatcompletions" {
		t.Fatalf("err = %v, want an *llm.Error", r.err)
	}
	if strings.Contains(r.err.Error(), key) || !strings.Contains(r.err.Error(), "Incorrect API key provided: [redacted]") {
		t.Fatalf("error text %q, want the key redacted", r.err.Error())
	}
}
