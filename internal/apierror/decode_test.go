package apierror_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/internal/apierror"
	"github.com/forever-agents/forever/internal/apierror/apierrortest"
)

type fuzzLevel int

type fuzzPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type fuzzMessage struct {
	ID    string     `json:"id"`
	Parts []fuzzPart `json:"parts"`
}

// fuzzCursor is a custom decoder returning an *apierror.Error in a
// json.UnmarshalTypeError, as replay.Cursor does.
type fuzzCursor uint64

func (c *fuzzCursor) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		return nil
	}
	return &json.UnmarshalTypeError{Value: "number", Type: reflect.TypeFor[fuzzCursor](), Err: apierror.New(400, `a cursor must be a string of digits such as "42"`)}
}

// fuzzChatRequest has a field of every kind a request can have.
type fuzzChatRequest struct {
	Text          string            `json:"text"`
	Messages      []fuzzMessage     `json:"messages"`
	ExpectVersion *int              `json:"expectVersion"`
	Limit         uint16            `json:"limit"`
	Ratio         float32           `json:"ratio"`
	Approved      *bool             `json:"approved"`
	Level         fuzzLevel         `json:"level"`
	Labels        map[string]string `json:"labels"`
	Raw           json.RawMessage   `json:"raw"`
	Any           any               `json:"any"`
	Data          []byte            `json:"data"`
	Addr          netip.Addr        `json:"addr"`
	Wait          time.Duration     `json:"wait"`
	At            time.Time         `json:"at"`
	Pair          [2]int8           `json:"pair"`
	After         fuzzCursor        `json:"after"`
	Nested        *fuzzChatRequest  `json:"nested"`
}

func TestDecodeMessages(t *testing.T) {
	tests := []struct {
		name, in string
		strict   bool
		want     string
	}{
		{"wrong type", `{"text":1}`, false, `"text" must be a string, got a number`},
		{"nested index", `{"messages":[{},{"parts":[{"text":2}]}]}`, false, `"messages[1].parts[0].text" must be a string, got a number`},
		{"fraction into int", `{"expectVersion":1.5}`, false, `"expectVersion" must be a whole number, got 1.5`},
		{"string into int", `{"expectVersion":"3"}`, false, `"expectVersion" must be a whole number, got a string`},
		{"negative into uint", `{"limit":-1}`, false, `"limit" must be a whole number of 0 or more, got -1`},
		{"overflow", `{"limit":70000}`, false, `"limit" must be a whole number of 0 or more, got 70000, which is out of range`},
		{"float overflow", `{"ratio":1e100}`, false, `"ratio" must be a number, got 1e100, which is out of range`},
		{"bool", `{"approved":"yes"}`, false, `"approved" must be true or false, got a string`},
		{"named int", `{"level":"high"}`, false, `"level" must be a whole number, got a string`},
		{"map value", `{"labels":{"a":1}}`, false, `"labels.a" must be a string, got a number`},
		{"text unmarshaler", `{"addr":1}`, false, `"addr" must be a string, got a number`},
		{"custom decoder", `{"after":1.5}`, false, `a cursor must be a string of digits such as "42"`},
		{"top level", `[1]`, false, `the body must be an object, got an array`},
		{"field as sent", `{"TEXT":3}`, false, `"TEXT" must be a string, got a number`},
		{"syntax", `{"text":"a",}`, false, `the body is not valid JSON: unexpected "}" at byte 12`},
		{"truncated", `{"text":`, false, `the body is not valid JSON: it ends early, at byte 8`},
		{"empty", ` `, false, `the body is empty; it must be an object`},
		{"two values", `{} {}`, false, `the body must be one JSON value; more follows at byte 3`},
		{"trailing junk", `{"text":"a"} x`, false, `the body must be one JSON value; more follows at byte 13`},
		{"unknown field ignored", `{"txt":"a"}`, false, ``},
		{"unknown field", `{"txt":"a"}`, true, `the body has an unknown field "txt"`},
		{"unknown nested", `{"nested":{"zz":1}}`, true, `the body has an unknown field "zz"`},
		{"ok", `{"text":"hi","messages":[{"id":"m"}],"after":"7"}`, true, ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v fuzzChatRequest
			var opts []apierror.DecodeOpt
			if tt.strict {
				opts = append(opts, apierror.Strict())
			}
			err := apierror.Decode([]byte(tt.in), &v, opts...)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Decode(%s) = %v, want nil", tt.in, err)
				}
				return
			}
			var e *apierror.Error
			if !errors.As(err, &e) || e.Code != 400 {
				t.Fatalf("Decode(%s) = %#v, want a 400 *Error", tt.in, err)
			}
			if got := e.Message; got != tt.want {
				t.Fatalf("Decode(%s)\n got %s\nwant %s", tt.in, got, tt.want)
			}
			checkNoGo(t, tt.in, e.Message)
		})
	}
}

// TestFromJSONOfUnmarshal: errors of json.Unmarshal (not a Decoder) read
// the same.
func TestFromJSONOfUnmarshal(t *testing.T) {
	var v fuzzChatRequest
	for in, want := range map[string]string{
		`{"text":1}`: `"text" must be a string, got a number`,
		`{"text":`:   `the body is not valid JSON: it ends early, at byte 8`,
		`{"text"x`:   `the body is not valid JSON: unexpected "x" at byte 7`,
	} {
		err := json.Unmarshal([]byte(in), &v)
		if got := apierror.FromJSON(err, []byte(in), reflect.TypeOf(&v)).Message; got != want {
			t.Errorf("FromJSON(%s) = %q, want %q (from %v)", in, got, want, err)
		}
	}
	var notPointer any = v
	if e := apierror.FromJSON(json.Unmarshal([]byte(`{}`), notPointer), nil, nil); e.Code != 500 {
		t.Errorf("a non-pointer target: %+v, want 500", e)
	}
}

func TestDecodeWithin(t *testing.T) {
	var v fuzzChatRequest
	for in, want := range map[string]string{
		`{"messages":[{"id":1}]}`: `"body.messages[0].id" must be a string, got a number`,
		`"hi"`:                    `"body" must be an object, got a string`,
		``:                        `"body" is empty; it must be an object`,
		`{`:                       `"body" is not valid JSON: it ends early, at byte 1`,
	} {
		err := apierror.Decode([]byte(in), &v, apierror.Within("body"))
		if err == nil || err.Error() != want {
			t.Errorf("Decode(%s) = %v, want %s", in, err, want)
		}
	}
}

func TestReadBody(t *testing.T) {
	b, err := apierror.ReadBody(strings.NewReader("12345"), 5)
	if err != nil || string(b) != "12345" {
		t.Fatalf("at the limit: %q %v", b, err)
	}
	_, err = apierror.ReadBody(strings.NewReader("123456"), 5)
	var e *apierror.Error
	if !errors.As(err, &e) || e.Code != http.StatusRequestEntityTooLarge || e.Message != "the request is larger than the limit of 5 bytes (5 bytes)" {
		t.Fatalf("over the limit: %#v", err)
	}
	if got, want := apierror.SizeText(600<<10, 512<<10), "the request is 614400 bytes; the limit is 524288 bytes (512 KiB)"; got != want {
		t.Fatalf("SizeText = %q, want %q", got, want)
	}
}

// checkNoGo fails when msg, outside what it quotes, names a Go type or
// package, or one of the fuzz targets' types.
func checkNoGo(t *testing.T, in, msg string) {
	t.Helper()
	if m := apierrortest.GoName(msg); m != "" {
		t.Fatalf("message for %q names %q: %s", in, m, msg)
	}
	if strings.Contains(strings.ToLower(msg), "fuzz") && !strings.Contains(strings.ToLower(in), "fuzz") {
		t.Fatalf("message for %q names a Go type: %s", in, msg)
	}
}

// FuzzDecode: whatever the body, Decode either succeeds or returns a 400
// *Error whose message names no Go type, package or encoding/json wording.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"text":1}`, `{"messages":[{"parts":[{"text":2}]}]}`, `{"expectVersion":1.5}`, `{"limit":-1}`,
		`{"ratio":1e400}`, `{"approved":"x"}`, `{"labels":{"a":[]}}`, `{"addr":"x"}`, `{"addr":7}`,
		`{"data":"!!"}`, `{"wait":"1s"}`, `{"at":"yesterday"}`, `{"pair":[1,2,3]}`, `{"pair":[300]}`,
		`{"after":{}}`, `{"nested":{"nested":{"text":[]}}}`, `[]`, `"x"`, `null`, `{`, ``, "\xff", `{"a":1} {`,
		`{"text":"\ud800"}`, `{"Text":"x","text":2}`,
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, strict bool) {
		var opts []apierror.DecodeOpt
		if strict {
			opts = append(opts, apierror.Strict())
		}
		for _, v := range []any{new(fuzzChatRequest), new([]fuzzMessage), new(map[string]int), new(fuzzLevel)} {
			err := apierror.Decode(data, v, opts...)
			if err == nil {
				continue
			}
			var e *apierror.Error
			if !errors.As(err, &e) || e.Code != 400 || e.Message == "" {
				t.Fatalf("Decode(%q, %T) = %#v, want a 400 *Error", data, v, err)
			}
			checkNoGo(t, string(data), e.Message)
			if !bytes.Equal(e.AppendJSON(nil), mustMarshal(t, e)) || !json.Valid(e.AppendJSON(nil)) {
				t.Fatalf("error %+v encodes as %s", e, e.AppendJSON(nil))
			}
		}
	})
}

func mustMarshal(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBadAgentID: an id over the length limit is blamed on the limit, not
// on characters it may not even hold.
func TestBadAgentID(t *testing.T) {
	for _, tt := range []struct{ id, want string }{
		{"a.b", `agent id "a.b" is not a valid agent id: ` + apierror.AgentIDRule},
		{strings.Repeat("a", 300), `agent id "` + strings.Repeat("a", 64) + `..." is 300 bytes, over the limit of 256: ` + apierror.AgentIDRule},
	} {
		e := apierror.BadAgentID("agent id", tt.id)
		if e.Code != apierror.BadRequest || e.Message != tt.want {
			t.Errorf("BadAgentID(%.10q...) = %d %q, want 400 %q", tt.id, e.Code, e.Message, tt.want)
		}
	}
}
