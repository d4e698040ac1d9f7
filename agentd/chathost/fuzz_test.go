package chathost

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat"
)

// FuzzParseChatRequest: a chat command payload (NATS, or the body the
// gateway forwards) is a Request or an error wrapping ErrBadRequest,
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
		req, err := ParseRequest(data)
		if err != nil {
			if !errors.Is(err, host.ErrBadRequest) {
				t.Fatalf("ParseRequest(%q): %v does not wrap host.ErrBadRequest", data, err)
			}
			return
		}
		// The turn keeps the body's request context, without messages.
		if !bytes.Equal(req.Body, requestContext(data)) {
			t.Fatalf("Body = %q, want the payload %q without its messages", req.Body, data)
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
		back, err := ParseRequest(enc)
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
				if !errors.Is(err, host.ErrBadRequest) {
					t.Fatalf("decodeOptional(%q, %T): %v does not wrap host.ErrBadRequest", data, v, err)
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
