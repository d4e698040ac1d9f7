package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/apierror"
	"github.com/forever-agents/forever/internal/apierror/apierrortest"
)

// FuzzChatBody: a POST /v1/chat body, as the AI SDK sends it or anything
// else, is accepted with a valid chat id and at least one message, or
// refused as 400 (ErrBadRequest) or 413, with a message that names no Go
// type or package; the body accepted is passed on unchanged.
func FuzzChatBody(f *testing.F) {
	for _, s := range []string{
		`{"id":"a1","messages":[{"id":"m1","role":"user","parts":[{"type":"text","text":"hi"}]}],"trigger":"submit-message","messageId":"m1"}`,
		`{"id":"a1","messages":[]}`, `{"id":"a.b","messages":[{}]}`, `{"id":"","messages":[{}]}`,
		`{"id":7}`, `{"messages":null}`, `null`, `[]`, `{`, ``, "{\"id\":\"\xff\",\"messages\":[1]}",
	} {
		f.Add([]byte(s), uint16(1024))
	}
	f.Fuzz(func(t *testing.T, data []byte, limit uint16) {
		req, body, err := readChatBody(bytes.NewReader(data), int64(limit))
		if err != nil {
			var e *apierror.Error
			if !errors.As(err, &e) || !(e.Code == http.StatusBadRequest && errors.Is(err, ErrBadRequest) || e.Code == http.StatusRequestEntityTooLarge) {
				t.Fatalf("readChatBody(%q): %#v", data, err)
			}
			if len(data) > int(limit) && e.Code != http.StatusRequestEntityTooLarge {
				t.Fatalf("readChatBody of %d bytes over a %d limit: %v", len(data), limit, err)
			}
			apierrortest.CheckMessage(t, fmt.Sprintf("body %q", data), e.Message)
			return
		}
		if len(data) > int(limit) || !eventlog.ValidToken(req.ID) || len(req.Messages) == 0 || !bytes.Equal(body, data) {
			t.Fatalf("readChatBody(%q) accepted %+v, body %q", data, req, body)
		}
	})
}

// FuzzResumeParams: the Last-Event-ID header and the after parameter of a
// resume give the later of the two cursors, or an error that is a 400
// wrapping ErrBadCursor, naming no Go type or package.
func FuzzResumeParams(f *testing.F) {
	for _, p := range [][2]string{{"", ""}, {"42", ""}, {"", "7"}, {"42", "7"}, {"x", "1"}, {"1", "-1"}, {"18446744073709551616", ""}, {" 1", "1 "}} {
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, lastEventID, after string) {
		c, explicit, err := resumeAfter(lastEventID, after)
		if err != nil {
			if !errors.Is(err, ErrBadCursor) || StatusCode(err) != http.StatusBadRequest {
				t.Fatalf("resumeAfter(%q, %q): %v", lastEventID, after, err)
			}
			apierrortest.CheckMessage(t, fmt.Sprintf("resume %q %q", lastEventID, after), apiError(err).Message)
			return
		}
		if explicit != (after != "") {
			t.Fatalf("resumeAfter(%q, %q): explicit = %v", lastEventID, after, explicit)
		}
		var want Cursor
		for _, s := range []string{lastEventID, after} {
			if s != "" {
				p, err := ParseCursor(s)
				if err != nil {
					t.Fatalf("resumeAfter accepted %q: %v", s, err)
				}
				want = max(want, p)
			}
		}
		if c != want {
			t.Fatalf("resumeAfter(%q, %q) = %v, want %v", lastEventID, after, c, want)
		}
	})
}

// FuzzWSFrame: a WebSocket text frame from the client is a frame {type,
// ...} or a 400 the connection answers with an error frame (it must not
// end the connection), naming no Go type or package; the body of a chat
// frame is checked like a POST /v1/chat body, against the connection's
// chat.
func FuzzWSFrame(f *testing.F) {
	for _, s := range []string{
		`{"type":"resume"}`, `{"type":"resume","probeId":"p1"}`, `{"type":"resume","probeId":7}`, `{"type":"ack","requestId":"r1"}`, `{"type":"stop"}`,
		`{"type":"chat","body":{"id":"a1","messages":[{"id":"m1","role":"user","parts":[{"type":"text","text":"hi"}]}]}}`,
		`{"type":"chat","body":{"id":"other","messages":[{}]}}`, `{"type":"chat"}`, `{"type":"chat","body":"x"}`,
		`{"type":7}`, `[]`, `{`, ``, `{"type":"unknown"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := decodeFrame(websocket.MessageText, data)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) || StatusCode(err) != http.StatusBadRequest {
				t.Fatalf("frame %q: %v", data, err)
			}
			apierrortest.CheckMessage(t, fmt.Sprintf("frame %q", data), apiError(err).Message)
			return
		}
		if in.Type != "chat" {
			return
		}
		body, err := chatFrameBody("a1", in.Body)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) || StatusCode(err) != http.StatusBadRequest {
				t.Fatalf("chat frame %q: %v", data, err)
			}
			apierrortest.CheckMessage(t, fmt.Sprintf("chat frame %q", data), apiError(err).Message)
			return
		}
		var req chatRequest
		if json.Unmarshal(body, &req) != nil || req.ID != "a1" || len(req.Messages) == 0 {
			t.Fatalf("chat frame %q accepted %q", data, body)
		}
	})
}

// FuzzWire: any stored chunk the gateway forwards is written as valid JSON
// of the same type with the fields that type carries, both in SSE data
// lines and in WebSocket frames.
func FuzzWire(f *testing.F) {
	for _, c := range []chunk.Chunk{
		{Type: chunk.Start, MessageID: "m1", RequestID: "r1"},
		{Type: chunk.TextDelta, ID: "t0", Delta: "h\u00e9\"<"},
		{Type: chunk.ToolInput, ToolCallID: "c1", ToolName: "search", Input: json.RawMessage(`{"q": "x"}`)},
		{Type: chunk.ToolOutput, ToolCallID: "c1"},
		{Type: chunk.Finish, MessageMetadata: json.RawMessage(`{"usage":{"inputTokens":1}}`)},
		{Type: chunk.Error, ErrorText: "boom"},
		{Type: "data-x", ID: "d", Output: json.RawMessage(`[1]`), RequestID: "r1"},
	} {
		b, _ := c.MarshalJSON()
		f.Add(b)
	}
	f.Add([]byte(`{"type":"finish","messageMetadata":null}`))
	f.Fuzz(func(t *testing.T, stored []byte) {
		var c chunk.Chunk
		if json.Unmarshal(stored, &c) != nil {
			return // not a chunk: the reader skips it as corrupt
		}
		out := appendWire([]byte("data: "), c)
		wire, ok := bytes.CutPrefix(out, []byte("data: "))
		if !ok || !json.Valid(wire) {
			t.Fatalf("chunk %q written as %q", stored, out)
		}
		var got chunk.Chunk
		if err := json.Unmarshal(wire, &got); err != nil || got.Type != c.Type || got.RequestID != "" {
			t.Fatalf("chunk %q written as %s: %+v, %v", stored, wire, got, err)
		}
		for _, f := range []struct{ got, want string }{
			{got.ID, c.ID}, {got.Delta, c.Delta}, {got.ToolCallID, c.ToolCallID}, {got.ErrorText, c.ErrorText},
		} {
			if f.got != "" && f.got != f.want {
				t.Fatalf("chunk %q written as %s: field %q, want %q", stored, wire, f.got, f.want)
			}
		}
		frame, err := json.Marshal(wsOut{Type: "chunk", Chunk: (*wireChunk)(&c)})
		if err != nil || !json.Valid(frame) {
			t.Fatalf("chunk %q as a frame: %s, %v", stored, frame, err)
		}
		var back struct{ Chunk json.RawMessage }
		if err := json.Unmarshal(frame, &back); err != nil || !reflect.DeepEqual(decodeAny(back.Chunk), decodeAny(wire)) {
			t.Fatalf("frame %s carries %s, want %s", frame, back.Chunk, wire)
		}
	})
}

func decodeAny(b []byte) any {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err.Error()
	}
	return v
}

// FuzzOriginAllowed: any Origin header and pattern list gives an answer
// without panicking; a pattern list of "*" allows exactly the origins with
// a host; an empty list allows none.
func FuzzOriginAllowed(f *testing.F) {
	for _, s := range []string{"https://app.example.com", "null", "http://[::1]:8080", "https://a.b.c:443/x?y", "", "ws://x", "https://%zz"} {
		f.Add(s, "*.example.com")
	}
	f.Fuzz(func(t *testing.T, origin, pattern string) {
		originAllowed([]string{pattern}, origin)
		if originAllowed(nil, origin) {
			t.Fatalf("no pattern allowed %q", origin)
		}
		u, err := url.Parse(origin)
		hasHost := err == nil && u.Host != "" && !strings.Contains(u.Host, "/")
		if got := originAllowed([]string{"*"}, origin); got != hasHost {
			t.Fatalf("OriginAllowed(*, %q) = %v, want %v", origin, got, hasHost)
		}
	})
}
