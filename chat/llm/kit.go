package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"os"
	"strings"
)

// What a provider package builds on. The remote providers live in packages
// of their own (chat/llm/openai, chat/llm/anthropic) so that only a program
// that builds one compiles its vendor SDK; they, and a user's own provider,
// share these helpers with Local.

// Sink wraps the yield function of an iterator and remembers when the
// consumer stopped. A provider's stream sends its deltas through one.
type Sink struct {
	yield   func(Delta, error) bool
	stopped bool
}

// NewSink returns a Sink over yield. A provider that filters another sink's
// deltas (skipping text it already sent, say) wraps it in one.
func NewSink(yield func(Delta, error) bool) *Sink { return &Sink{yield: yield} }

// Send yields d and reports whether the consumer wants more.
func (s *Sink) Send(d Delta) bool {
	if s.stopped {
		return false
	}
	if !s.yield(d, nil) {
		s.stopped = true
	}
	return !s.stopped
}

// NewStream adapts run to an iterator: run sends deltas through the sink and
// returns the error that ends the stream, yielded once unless the consumer
// already stopped, with secret (the provider's API key) redacted from it.
func NewStream(secret string, run func(s *Sink) error) iter.Seq2[Delta, error] {
	return func(yield func(Delta, error) bool) {
		s := &Sink{yield: yield}
		if err := run(s); err != nil && !s.stopped {
			yield(Delta{}, redact(secret, err))
		}
	}
}

// ContextErr returns the cause of ctx when it is done, else nil. A stream
// that fails because its context ended yields this error, not an *Error.
func ContextErr(ctx context.Context) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// RetryableStatus classifies an HTTP status: 408, 409, 425, 429 and 5xx
// (including Anthropic's 529) may succeed later; other 4xx will not.
func RetryableStatus(code int) bool {
	switch {
	case code == http.StatusRequestTimeout, code == http.StatusConflict,
		code == http.StatusTooEarly, code == http.StatusTooManyRequests:
		return true
	case code >= 500:
		return true
	case code >= 400:
		return false
	}
	return true
}

// missingKeyError is the construction error for a missing API key.
type missingKeyError struct{ provider, env string }

func (e *missingKeyError) Error() string {
	return "llm: " + e.provider + ": " + e.env + " is not set"
}

func (e *missingKeyError) Is(target error) bool { return target == ErrMissingAPIKey }

// MissingKey is a remote provider's construction error when neither its
// config nor the environment variable env holds an API key; it matches
// ErrMissingAPIKey.
func MissingKey(provider, env string) error { return &missingKeyError{provider: provider, env: env} }

// InvalidConfig is a provider's configuration error; it matches
// ErrInvalidConfig.
func InvalidConfig(provider, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, provider, fmt.Sprintf(format, args...))
}

// EnvSecret reads a secret from the environment: the variable name, else
// the file named by name_FILE (the Docker and Kubernetes secrets
// convention), trimmed of surrounding white space. "" when neither is set.
// An unreadable file is an ErrInvalidConfig naming the variable, never the
// file's content.
func EnvSecret(name string) (string, error) {
	if v := os.Getenv(name); v != "" {
		return v, nil
	}
	path := os.Getenv(name + "_FILE")
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%w: %s_FILE: %w", ErrInvalidConfig, name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Input returns the messages to send for r: r.Messages, followed, when
// r.Continue has PartialText, by the partial assistant text and a user
// [ContinuePrompt]. Current models reject assistant prefill, so the partial
// answer is never the last message.
func (r Request) Input() []Message {
	c := r.Continue
	if c == nil || c.PartialText == "" {
		return r.Messages
	}
	msgs := make([]Message, 0, len(r.Messages)+2)
	msgs = append(msgs, r.Messages...)
	msgs = append(msgs, Text(RoleAssistant, c.PartialText), Text(RoleUser, ContinuePrompt))
	return msgs
}

// ModelOr returns the request's model, or def when it names none.
func (r Request) ModelOr(def string) string {
	if r.Model != "" {
		return r.Model
	}
	return def
}

// PlainText concatenates the text parts of m.
func (m Message) PlainText() string {
	var s string
	for _, p := range m.Parts {
		s += p.Text
	}
	return s
}

// SchemaMap decodes the tool's JSON Schema into a map; a nil schema is an
// empty object schema.
func (t Tool) SchemaMap() (map[string]any, error) {
	if len(t.Schema) == 0 {
		return map[string]any{"type": "object", "properties": map[string]any{}}, nil
	}
	var m map[string]any
	if err := json.Unmarshal(t.Schema, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// RawInput returns a tool call's input as text, "{}" when empty.
func RawInput(in json.RawMessage) string {
	if len(in) == 0 {
		return "{}"
	}
	return string(in)
}

// rawInputKey names the one field of the object that carries a tool input
// that is not a JSON object back to a model.
const rawInputKey = "_raw_input"

// SentInput is a tool call's input as it is sent back in a request: a JSON
// object. A model may have written anything (the chat layer answers such a
// call with an error result), but Anthropic and some Chat Completions
// servers (Ollama) reject a request whose history holds a call with input
// that is not an object, so other input is wrapped as {"_raw_input": text}
// where the model can still see what it wrote.
func SentInput(in json.RawMessage) string {
	s := RawInput(in)
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(s), &obj) == nil && obj != nil {
		return s
	}
	b, _ := json.Marshal(map[string]string{rawInputKey: s}) // a string map always marshals
	return string(b)
}
