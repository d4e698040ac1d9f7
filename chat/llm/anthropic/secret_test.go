package anthropic_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/chat/llm/anthropic"
	"github.com/forever-agents/forever/chat/llm/llmtest"
	"github.com/forever-agents/forever/chat/llm/openai"
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
	p, err := anthropic.New(anthropic.Config{BaseURL: srv.URL, Model: "claude"})
	if err != nil {
		t.Fatal(err)
	}
	if r := llmtest.Collect(t, t.Context(), p, llmtest.UserRequest("x")); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := srv.Requests()[0].Header.Get("X-Api-Key"); got != "ak-from-file" {
		t.Fatalf("key sent = %q, want the file's, trimmed", got)
	}

	t.Setenv("ANTHROPIC_API_KEY_FILE", filepath.Join(t.TempDir(), "missing"))
	_, err = anthropic.New(anthropic.Config{BaseURL: srv.URL, Model: "claude"})
	if !errors.Is(err, llm.ErrInvalidConfig) || !strings.Contains(err.Error(), "ANTHROPIC_API_KEY_FILE") {
		t.Fatalf("missing key file: %v", err)
	}
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_API_KEY_FILE", path)
	if _, err := openai.NewChatCompletions(openai.ChatCompletionsConfig{Model: "gpt"}); err != nil {
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
	p, err := openai.NewChatCompletions(openai.ChatCompletionsConfig{APIKey: key, BaseURL: srv.URL + "/v1", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	r := llmtest.Collect(t, t.Context(), p, llmtest.UserRequest("x"))
	var e *llm.Error
	if !errors.As(r.Err, &e) || e.Provider != "chatcompletions" {
		t.Fatalf("err = %v, want an *llm.Error", r.Err)
	}
	if strings.Contains(r.Err.Error(), key) || !strings.Contains(r.Err.Error(), "Incorrect API key provided: [redacted]") {
		t.Fatalf("error text %q, want the key redacted", r.Err.Error())
	}
}
