package apierror_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/apierror"
	"github.com/forever-agents/forever/internal/apierror/apierrortest"
	"github.com/nats-io/nats.go/micro"
)

// statusErr is an internal error carrying a code, as chat's errors do.
type statusErr struct{ code int }

func (e statusErr) Error() string   { return "chat: a turn is already active" }
func (e statusErr) StatusCode() int { return e.code }

type quotaErr struct{}

func (quotaErr) Error() string             { return "tenants: quota" }
func (quotaErr) StatusCode() int           { return 429 }
func (quotaErr) RetryAfter() time.Duration { return 1500 * time.Millisecond }

func TestFrom(t *testing.T) {
	own := apierror.New(apierror.NotFound, "no agent %q", "bot")
	tests := []struct {
		name       string
		err        error
		code       int
		msg        string
		retryAfter time.Duration
	}{
		{"nil", nil, 0, "", 0},
		{"an *Error, wrapped", fmt.Errorf("host: %w", own), 404, `no agent "bot"`, 0},
		{"status code, own message kept inside", fmt.Errorf("agentd: %w", statusErr{409}), 409, apierror.Text(409), 0},
		{"unlisted 4xx", statusErr{422}, 400, apierror.Text(400), 0},
		{"unlisted 5xx", statusErr{502}, 500, apierror.Text(500), 0},
		{"status out of range", statusErr{200}, 500, apierror.Text(500), 0},
		{"deadline", fmt.Errorf("read: %w", context.DeadlineExceeded), 504, apierror.Text(504), 0},
		{"retry after", fmt.Errorf("x: %w", quotaErr{}), 429, apierror.Text(429), 1500 * time.Millisecond},
		{"anything else", errors.New("eventlog: pebble: closed"), 500, apierror.Text(500), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := apierror.From(tt.err)
			if tt.err == nil {
				if e != nil {
					t.Fatalf("From(nil) = %v", e)
				}
				return
			}
			if e.Code != tt.code || e.Message != tt.msg || e.RetryAfter != tt.retryAfter {
				t.Fatalf("From(%v) = %+v, want %d %q retry %v", tt.err, e, tt.code, tt.msg, tt.retryAfter)
			}
			if !errors.Is(e, tt.err) && !errors.Is(tt.err, e) {
				t.Fatalf("From(%v) = %v, neither wraps the other", tt.err, e)
			}
			checkNoGo(t, tt.name, e.Message)
		})
	}
	for _, code := range apierror.Codes() {
		checkNoGo(t, fmt.Sprint(code), apierror.Text(code))
		if apierror.Known(code) != code {
			t.Errorf("Known(%d) = %d", code, apierror.Known(code))
		}
	}
}

func TestWriteHTTP(t *testing.T) {
	for _, tt := range []struct {
		e          *apierror.Error
		retryAfter string
	}{
		{apierror.New(400, `"text" must be a string, got a number`), ""},
		{apierror.New(503, "moving"), "1"},
		{apierror.New(429, "over").WithRetryAfter(2100 * time.Millisecond), "3"},
	} {
		rec := httptest.NewRecorder()
		tt.e.WriteHTTP(rec)
		want := fmt.Sprintf("{\"code\":%d,\"error\":%q}\n", tt.e.Code, tt.e.Message)
		if rec.Code != tt.e.Code || rec.Body.String() != want {
			t.Errorf("WriteHTTP(%+v): %d %s, want %s", tt.e, rec.Code, rec.Body, want)
		}
		if got := rec.Header().Get("Retry-After"); got != tt.retryAfter {
			t.Errorf("WriteHTTP(%+v): Retry-After %q, want %q", tt.e, got, tt.retryAfter)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("content-type %q", ct)
		}
		if p, ok := apierror.Parse(rec.Body.Bytes()); !ok || p.Code != tt.e.Code || p.Message != tt.e.Message {
			t.Errorf("Parse(%s) = %+v, %v", rec.Body, p, ok)
		}
	}
	if _, ok := apierror.Parse([]byte(`{"messages":[]}`)); ok {
		t.Error("Parse took a reply that is not an error")
	}
}

// TestSameShapeOverNATS: a NATS micro error built with Micro carries the
// same code and message in its headers and the same body as over HTTP.
func TestSameShapeOverNATS(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	nc := eventlogtest.Connect(t, s)
	e := apierror.New(apierror.TooLarge, "%s", apierror.SizeText(600<<10, 512<<10))
	svc, err := micro.AddService(nc, micro.Config{
		Name: "t", Version: "0.0.1",
		Endpoint: &micro.EndpointConfig{Subject: "t.chat", Handler: micro.HandlerFunc(func(r micro.Request) {
			r.Error(e.Micro())
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop() })
	msg, err := nc.Request("t.chat", []byte("x"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	e.WriteHTTP(rec)
	httpBody, _ := io.ReadAll(rec.Result().Body)
	if got, want := string(msg.Data)+"\n", string(httpBody); got != want {
		t.Fatalf("NATS body %q, HTTP body %q", got, want)
	}
	if msg.Header.Get(micro.ErrorCodeHeader) != "413" || msg.Header.Get(micro.ErrorHeader) != e.Message {
		t.Fatalf("NATS headers %v", msg.Header)
	}
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("HTTP status %d", rec.Code)
	}
}

// TestGoName: the messages issue 26 quotes are caught; sentences that
// quote what the client sent are not.
func TestGoName(t *testing.T) {
	for _, msg := range []string{
		"json: cannot unmarshal number into Go struct field ChatRequest.text of type string",
		"Go struct field stateRequest.expectVersion of type int",
		`replay: bad request: chat id "a.b" is not valid`,
		`agentd: bad request: x`,
		"want a json.RawMessage",
	} {
		if apierrortest.GoName(msg) == "" {
			t.Errorf("GoName(%q) found nothing", msg)
		}
	}
	for _, msg := range []string{
		`"text" must be a string, got a number`,
		`the body has an unknown field "json: struct int"`,
		apierror.SizeText(600<<10, 512<<10),
	} {
		if m := apierrortest.GoName(msg); m != "" {
			t.Errorf("GoName(%q) = %q", msg, m)
		}
	}
}
