package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/apierror"
	"github.com/forever-agents/forever/internal/apierror/apierrortest"
)

// FuzzChatBody: a POST /v1/chat body, as the AI SDK sends it or anything
// else, is read as a stream and accepted with a valid chat id and at least
// one message, or refused as 400 (ErrBadRequest) or 413, with a message
// that names no Go type or package. It agrees with encoding/json reading
// the whole body: the body passed on has the same fields, the last message
// alone, and the others summed up (their count); the limit bounds what is
// kept, never the earlier messages.
func FuzzChatBody(f *testing.F) {
	for _, s := range []string{
		`{"id":"a1","messages":[{"id":"m1","role":"user","parts":[{"type":"text","text":"hi"}]}],"trigger":"submit-message","messageId":"m1"}`,
		`{"id":"a1","messages":[{"id":"m1","role":"user","parts":[{"type":"text","text":"` + strings.Repeat("long ", 400) + `"}]},{"id":"m2","role":"assistant","parts":[{"type":"step-start"},{"type":"text","text":"ok"}]},{"id":"m3","role":"user","parts":[{"text":"hi","type":"text"}],"metadata":{"n":1.50}}],"trigger":"submit-message","x":[1,null,true]}`,
		`{"messages":[{"id":"m1"},2,"x",null,[{}]],"id":"a1"}`, `{"id":"a1","messages":[{"id":"m1"}],"messages":[]}`, `{"id":"a1","messages":[{}]} {}`,
		`{"id":"a1","messages":[]}`, `{"id":"a.b","messages":[{}]}`, `{"id":"","messages":[{}]}`, `{"id":"a1","messages":{}}`,
		`{"id":7}`, `{"messages":null}`, `null`, `[]`, `{`, ``, "{\"id\":\"\xff\",\"messages\":[1]}",
	} {
		f.Add([]byte(s), uint16(1024))
	}
	f.Fuzz(func(t *testing.T, data []byte, limit uint16) {
		ref, kept, refOK := referenceChatBody(data)
		req, body, err := readChatBody(bytes.NewReader(data), int64(limit))
		if err != nil {
			var e *apierror.Error
			if !errors.As(err, &e) || !(e.Code == http.StatusBadRequest && errors.Is(err, ErrBadRequest) || e.Code == http.StatusRequestEntityTooLarge) {
				t.Fatalf("readChatBody(%q): %#v", data, err)
			}
			apierrortest.CheckMessage(t, fmt.Sprintf("body %q", data), e.Message)
			switch {
			case e.Code == http.StatusBadRequest && refOK:
				t.Fatalf("readChatBody(%q) refused a body encoding/json reads: %v", data, err)
			case e.Code == http.StatusRequestEntityTooLarge && (!refOK || 2*len(kept) <= int(limit)):
				t.Fatalf("readChatBody(%q) refused %d bytes kept as over %d: %v", data, len(kept), limit, err)
			}
			return
		}
		if !refOK {
			t.Fatalf("readChatBody(%q) accepted a body encoding/json refuses: %+v", data, req)
		}
		var got map[string]any
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("readChatBody(%q) passed on %q: %v", data, body, err)
		}
		msgs, _ := ref["messages"].([]any)
		want := map[string]any{}
		for k, v := range ref {
			want[k] = v
		}
		want["messages"] = msgs[len(msgs)-1:]
		delete(want, "history")
		if h, ok := got["history"].(map[string]any); ok {
			if n, _ := h["count"].(json.Number); n.String() != strconv.Itoa(len(msgs)-1) {
				t.Fatalf("readChatBody(%q): history %v, want %d messages", data, h, len(msgs)-1)
			}
			delete(got, "history")
		} else if len(msgs) > 1 {
			t.Fatalf("readChatBody(%q) passed on %s without a history", data, body)
		}
		if !reflect.DeepEqual(got, want) || req.ID != ref["id"] || len(req.Messages) != 1 {
			t.Fatalf("readChatBody(%q) passed on %s, want %v", data, body, want)
		}
	})
}

// referenceChatBody reads data as encoding/json does: ok when it is an
// object with a valid "id" and a non-empty "messages" array; kept is what
// the limit bounds, the body with its last message only.
func referenceChatBody(data []byte) (body map[string]any, kept []byte, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if dec.Decode(&body) != nil || body == nil {
		return nil, nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, false
	}
	id, _ := body["id"].(string)
	msgs, _ := body["messages"].([]any)
	if !eventlog.ValidToken(id) || len(msgs) == 0 {
		return nil, nil, false
	}
	k := map[string]any{}
	for f, v := range body {
		k[f] = v
	}
	k["messages"] = msgs[len(msgs)-1:]
	delete(k, "history")
	kept, _ = json.Marshal(k)
	return body, kept, true
}

// TestChatBodyHistoryNotBounded: a body whose earlier messages are far
// over the limit is read, as long as its last message fits, and a last
// message over the limit is a 413 that says so.
func TestChatBodyHistoryNotBounded(t *testing.T) {
	var b bytes.Buffer
	b.WriteString(`{"id":"a1","trigger":"submit-message","messages":[`)
	for i := range 3000 {
		fmt.Fprintf(&b, `{"id":"m%d","role":"user","parts":[{"type":"text","text":%q}]},`, i, strings.Repeat("x", 1000))
	}
	head := b.Len()
	b.WriteString(`{"id":"new","role":"user","parts":[{"type":"text","text":"the new one"}]}]}`)
	req, body, err := readChatBody(bytes.NewReader(b.Bytes()), 64<<10)
	if err != nil {
		t.Fatalf("a %d-byte body with a small new message: %v", b.Len(), err)
	}
	if len(body) > 2<<10 || req.ID != "a1" || !strings.Contains(string(req.Messages[0]), `"the new one"`) || !strings.Contains(string(body), `"count":3000`) {
		t.Fatalf("passed on %s", body)
	}
	b.Truncate(head)
	fmt.Fprintf(&b, `{"id":"new","role":"user","parts":[{"type":"text","text":%q}]}]}`, strings.Repeat("y", 70<<10))
	_, _, err = readChatBody(bytes.NewReader(b.Bytes()), 64<<10)
	if got := StatusCode(err); got != http.StatusRequestEntityTooLarge || !strings.Contains(apiError(err).Message, "new message") {
		t.Fatalf("a new message over the limit: %d %v", got, err)
	}
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
				if p.Compare(want) > 0 {
					want = p
				}
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
