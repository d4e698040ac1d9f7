package llmtest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// Event is one server-sent event.
type Event struct {
	// Name is the "event:" field; empty for Chat Completions, which sends
	// data lines only.
	Name string
	// Data is the "data:" payload, usually JSON.
	Data string
	// Seq is the OpenAI Responses sequence_number of the event, -1 when it
	// has none.
	Seq int64

	cut bool
}

// Cut is a pseudo-event: at this point the server hijacks the connection
// and closes it without ending the chunked body.
func Cut() Event { return Event{Seq: -1, cut: true} }

// Reply is the answer to one request.
type Reply struct {
	// Status defaults to 200.
	Status int
	// JSON, when set, is sent as an application/json body and Events are
	// ignored.
	JSON string
	// Events are sent as text/event-stream, flushed one by one.
	Events []Event
}

// Stream returns a 200 reply streaming events.
func Stream(events []Event) Reply { return Reply{Events: events} }

// JSONReply returns a reply with a JSON body.
func JSONReply(status int, body string) Reply { return Reply{Status: status, JSON: body} }

// OpenAIError returns an OpenAI-style error reply:
// {"error":{"message":..,"type":..,"code":..,"param":null}}.
func OpenAIError(status int, typ, code, message string) Reply {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": message, "type": typ, "code": code, "param": nil}})
	return JSONReply(status, string(b))
}

// AnthropicError returns an Anthropic-style error reply:
// {"type":"error","error":{"type":..,"message":..}}.
func AnthropicError(status int, typ, message string) Reply {
	return JSONReply(status, anthropicErrorJSON(typ, message))
}

// Request is a request the server received.
type Request struct {
	Method string
	Path   string
	Query  url.Values
	Header http.Header
	Body   []byte
}

// Decode unmarshals the JSON body into v.
func (r Request) Decode(v any) error { return json.Unmarshal(r.Body, v) }

// Server is a fake model server. It is safe for concurrent use.
type Server struct {
	// URL is the base URL, without trailing slash.
	URL string

	handler func(Request) Reply
	srv     *httptest.Server
	mu      sync.Mutex
	reqs    []Request
}

// NewServer starts a server that answers each request with handler and
// closes it when the test ends. handler runs on the server's goroutines.
func NewServer(t testing.TB, handler func(Request) Reply) *Server {
	t.Helper()
	s := &Server{handler: handler}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	t.Cleanup(s.srv.Close)
	return s
}

// Requests returns a copy of the requests received so far, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req := Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Header: r.Header.Clone(), Body: body}
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()

	reply := s.handler(req)
	status := reply.Status
	if status == 0 {
		status = http.StatusOK
	}
	if reply.JSON != "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, reply.JSON)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(status)
	fl, _ := w.(http.Flusher)
	for _, ev := range reply.Events {
		if ev.cut {
			if fl != nil {
				fl.Flush()
			}
			hj, ok := w.(http.Hijacker)
			if !ok {
				return
			}
			conn, _, err := hj.Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		var b strings.Builder
		if ev.Name != "" {
			b.WriteString("event: " + ev.Name + "\n")
		}
		b.WriteString("data: " + ev.Data + "\n\n")
		if _, err := io.WriteString(w, b.String()); err != nil {
			return
		}
		if fl != nil {
			fl.Flush()
		}
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only test values of known shape are marshalled
	}
	return string(b)
}
