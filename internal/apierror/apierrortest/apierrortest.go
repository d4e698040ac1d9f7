// Package apierrortest checks, in tests, that errors leaving the process
// have the shape and wording of package apierror.
package apierrortest

import (
	"encoding/json"
	"regexp"
	"testing"
)

// goWords matches what must not reach a client: Go's type and package
// words, encoding/json's phrasing ("json: cannot unmarshal ... Go struct
// field"), package prefixes ("replay: bad request:", "agentd: ...: chat:
// ...") and qualified Go identifiers ("json.RawMessage", "netip.Addr").
// Package names that are also English words (chat, replay, auth) count
// only as prefixes.
var goWords = regexp.MustCompile(`\b(json|Go|struct|[uU]nmarshal\w*|interface|map|reflect|u?int(8|16|32|64)?|float(32|64)?|complex(64|128)?|bool|uintptr|rune|nil|main|apierror|netip|agentd|eventlog|keepalive|mcptools|jetstream|pebble|nats-server)\b|\[\]|\*|\b[a-z]\w*\.[A-Z]\w*|(^|: )[a-z]+: `)

// quoted matches what a message quotes with %q: client input, shown as
// sent, which may be anything.
var quoted = regexp.MustCompile(`"(\\.|[^"\\])*"`)

// GoName returns the first Go type, package or encoding/json word in msg
// outside what msg quotes, or "" when there is none.
func GoName(msg string) string {
	return goWords.FindString(quoted.ReplaceAllString(msg, `""`))
}

// CheckMessage fails t when msg is empty or names a Go type or package
// (see GoName). what says where msg came from.
func CheckMessage(t testing.TB, what, msg string) {
	t.Helper()
	if msg == "" {
		t.Errorf("%s: empty error message", what)
		return
	}
	if m := GoName(msg); m != "" {
		t.Errorf("%s: message names %q: %s", what, m, msg)
	}
}

// CheckBody fails t unless body is exactly {"code":code,"error":"..."}
// with a message that passes CheckMessage, and returns the message.
func CheckBody(t testing.TB, what string, code int, body []byte) string {
	t.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		t.Errorf("%s: body %q is not a JSON object: %v", what, body, err)
		return ""
	}
	var v struct {
		Code  int    `json:"code"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(body, &v); err != nil || len(fields) != 2 || fields["code"] == nil || fields["error"] == nil {
		t.Errorf("%s: body %s, want exactly {\"code\":N,\"error\":\"...\"}", what, body)
		return ""
	}
	if v.Code != code {
		t.Errorf("%s: body code %d, want %d: %s", what, v.Code, code, body)
	}
	CheckMessage(t, what, v.Error)
	return v.Error
}
