package agentd

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/forever-agents/forever/chat"
)

// FuzzParseChatRequest: a chat command payload (NATS, or the body the
// gateway forwards) is a ChatRequest or an error wrapping ErrBadRequest,
// never a panic; a message taken from an AI SDK body is a user's; and the
// request re-encodes to a payload that parses to the same request.
func FuzzParseChatRequest(f *testing.F) {
	for _, s := range []string{
		`{"text":"hello"}`,
		`{"message":{"id":"m1","role":"user","parts":[{"type":"text","text":"hi"}]}}`,
		`{"id":"a1","messages":[{"id":"m0","role":"assistant","parts":[]},{"id":"m1","role":"user","parts":[{"type":"text","text":"hi"}]}],"trigger":"submit-message"}`,
		`{"id":"a1","messages":[{"id":"m1","role":"assistant","parts":[]}]}`,
		`{"text":"x","tools":[{"name":"search","description":"d","inputSchema":{"type":"object"}}]}`,
		`{"messages":[]}`, `null`, `[]`, `"text"`, `{"text":1}`, ``, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := ParseChatRequest(data)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("ParseChatRequest(%q): %v does not wrap ErrBadRequest", data, err)
			}
			return
		}
		if !bytes.Equal(req.Body, data) {
			t.Fatalf("Body = %q, want the payload %q", req.Body, data)
		}
		// From an AI SDK body: the last message is the user's to send, or
		// the assistant's waiting message, answered.
		if req.Text == "" && len(req.Messages) > 0 &&
			(req.Message == nil || req.Message.Role != chat.RoleUser) &&
			(req.Answering == nil || req.Answering.Role != chat.RoleAssistant) {
			t.Fatalf("message taken from an AI SDK body: %+v, answering %+v", req.Message, req.Answering)
		}
		enc, err := json.Marshal(req)
		if err != nil {
			return // a raw field encoding/json refuses to re-encode
		}
		back, err := ParseChatRequest(enc)
		if err != nil {
			t.Fatalf("re-encoded %s does not parse: %v", enc, err)
		}
		enc2, err := json.Marshal(back)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("round trip: %s then %s, %v", enc, enc2, err)
		}
	})
}

// FuzzCommandPayloads: the optional payloads of the messages, interrupt and
// state commands decode or fail with ErrBadRequest, and round-trip.
func FuzzCommandPayloads(f *testing.F) {
	for _, s := range []string{
		``, `null`, ` null `, `{}`, `{"after":"m3","limit":50}`, `{"limit":-1}`,
		`{"name":"turn","clear":true}`, `{"name":""}`,
		`{"value":{"k":[1,2]},"expectVersion":0}`, `{"value":null}`, `{"expectVersion":"1"}`, `[`, `7`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(v any) {
			err := decodeOptional(data, v)
			if err != nil {
				if !errors.Is(err, ErrBadRequest) {
					t.Fatalf("decodeOptional(%q, %T): %v does not wrap ErrBadRequest", data, v, err)
				}
				return
			}
			enc, err := json.Marshal(v)
			if err != nil {
				return
			}
			back := reflect.New(reflect.TypeOf(v).Elem()).Interface()
			if err := decodeOptional(enc, back); err != nil {
				t.Fatalf("re-encoded %s: %v", enc, err)
			}
			if enc2, _ := json.Marshal(back); !bytes.Equal(enc, enc2) {
				t.Fatalf("round trip of %T: %s then %s", v, enc, enc2)
			}
		}
		check(&chat.Page{})
		check(&interruptRequest{})
		check(&stateRequest{})
	})
}

// FuzzStepsStart: the steps agent's start payload is accepted within its
// bounds or refused with ErrBadRequest.
func FuzzStepsStart(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"steps":3,"delayMs":0}`, `{"steps":100001}`, `{"steps":5,"recoveryDelayMs":-1}`, `{"steps":1e10}`, `{"steps":"3"}`, `null`, `{"steps":2,"effect":"none"}`, `{"effect":"boom"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := parseStepsStart(data)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("parseStepsStart(%q): %v does not wrap ErrBadRequest", data, err)
			}
			return
		}
		if req.Steps < 1 || req.Steps > 100000 || req.DelayMS < 0 || req.RecoveryDelayMS < 0 ||
			(req.Effect != "" && req.Effect != StepEffectEvent && req.Effect != StepEffectNone) {
			t.Fatalf("parseStepsStart(%q) accepted %+v", data, req)
		}
		enc, _ := json.Marshal(req)
		if back, err := parseStepsStart(enc); err != nil || back != req {
			t.Fatalf("round trip of %s: %+v, %v", enc, back, err)
		}
	})
}

// FuzzCommandSubject: any subject a request arrives on gives an agent and a
// verb, the last two tokens, or an error wrapping ErrBadRequest.
func FuzzCommandSubject(f *testing.F) {
	for _, s := range []string{"forever.cmd.a1.chat", "p.q.cmd.a1.status", "forever.cmd.a1", "", "....", "forever.cmd..chat"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		agent, verb, err := commandSubject(subject)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("commandSubject(%q): %v does not wrap ErrBadRequest", subject, err)
			}
			return
		}
		if !strings.HasSuffix(subject, "."+agent+"."+verb) || strings.Contains(agent, ".") || strings.Contains(verb, ".") {
			t.Fatalf("commandSubject(%q) = %q, %q", subject, agent, verb)
		}
	})
}
