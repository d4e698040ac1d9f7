package apierror

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// SizeText is the sentence of a request over a size limit, the same on
// every transport: "the request is 5242880 bytes; the limit is 4194304
// bytes (4 MiB)". size may be -1 for "more than the limit" (a body read no
// further than the limit).
func SizeText(size, limit int64) string {
	if size < 0 {
		return fmt.Sprintf("the request is larger than the limit of %d bytes (%s)", limit, human(limit))
	}
	return fmt.Sprintf("the request is %d bytes; the limit is %d bytes (%s)", size, limit, human(limit))
}

// AgentIDRule says what an agent id is, for the errors of a bad one, on
// every transport. It is one NATS subject token (the id is a token of
// forever.cmd.<agent>.<verb> and of the log's subjects), at most 256 bytes
// so that every subject built from it stays well within the server's
// limits.
const AgentIDRule = `an agent id is 1 to 256 bytes of UTF-8 without ".", "*", ">", spaces or control characters`

// CursorRule says what a cursor (a stream or log sequence) is, for the
// errors of a bad one, on every transport and the CLI: each says "<where>
// %q is not a cursor: " and then this.
const CursorRule = `a cursor is a string of digits such as "42" (the id of an event, or the cursor of a frame)`

// Echo returns s for quoting in an error, cut to 64 bytes.
func Echo(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// BadAgentID is the 400 of an id that cannot be an agent's; where names
// it as the client sent it ("agent id", "\"id\"").
func BadAgentID(where, id string) *Error {
	if len(id) > MaxAgentID {
		// The length is what is wrong, whatever the bytes: say so first.
		return New(BadRequest, "%s %q is %d bytes, over the limit of %d: %s", where, Echo(id), len(id), MaxAgentID, AgentIDRule)
	}
	return New(BadRequest, "%s %q is not a valid agent id: %s", where, Echo(id), AgentIDRule)
}

// MaxAgentID is the longest agent id, in bytes (AgentIDRule).
const MaxAgentID = 256

// OverLimit returns the 413 *Error of a request over limit (see SizeText).
func OverLimit(size, limit int64) *Error { return New(TooLarge, "%s", SizeText(size, limit)) }

func human(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// ReadBody reads r up to limit bytes. A body over the limit is a 413
// (OverLimit, read no further than limit+1 bytes); a read that fails is a
// 400 saying the body could not be read.
func ReadBody(r io.Reader, limit int64) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, OverLimit(-1, limit).WithCause(err)
		}
		return nil, New(BadRequest, "the request body could not be read to its end").WithCause(err)
	}
	if int64(len(body)) > limit {
		return nil, OverLimit(-1, limit)
	}
	return body, nil
}

// DecodeOpt changes how Decode reads a body.
type DecodeOpt func(*decodeOpts)

type decodeOpts struct {
	strict  bool
	subject string
	within  string
}

// Strict makes a field the target does not have an error (400 naming the
// field) instead of being ignored.
func Strict() DecodeOpt { return func(o *decodeOpts) { o.strict = true } }

// Subject names what is decoded in the sentences that speak of the whole
// value: "the frame is not valid JSON" for Subject("the frame"). The
// default is "the body".
func Subject(noun string) DecodeOpt { return func(o *decodeOpts) { o.subject = noun } }

// Within says that the value decoded is the field path of a larger one
// (the "body" of a WebSocket frame): errors name `"body.messages"` rather
// than `"messages"`, and the whole value as `"body"`.
func Within(path string) DecodeOpt {
	return func(o *decodeOpts) { o.within, o.subject = path, strconv.Quote(path) }
}

// Decode decodes one JSON value from data into v (a pointer), as
// encoding/json does, and turns its errors into *Error sentences that name
// the JSON path the client sent, for example
//
//	"messages[0].text" must be a string, got a number
//	the body is not valid JSON: unexpected "}" at byte 12
//	the body has an unknown field "txt" (with Strict)
//
// An empty body and data after the value are errors too. An error from a
// custom UnmarshalJSON or UnmarshalText is sent as is when it is an *Error
// (or a *json.UnmarshalTypeError whose Err is one, which then gets its
// path), and as a generic sentence otherwise. A v that is not a non-nil
// pointer is a 500 (a bug).
func Decode(data []byte, v any, opts ...DecodeOpt) error {
	o := decodeOpts{subject: "the body"}
	for _, opt := range opts {
		opt(&o)
	}
	if len(bytes.TrimLeft(data, " \t\r\n")) == 0 {
		return New(BadRequest, "%s is empty; it must be %s", o.subject, want(reflect.TypeOf(v)))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if o.strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return fromJSON(err, data, reflect.TypeOf(v), o.subject, o.within)
	}
	if dec.More() {
		return New(BadRequest, "%s must be one JSON value; more follows at byte %d", o.subject, dec.InputOffset())
	}
	if _, err := dec.Token(); err != io.EOF {
		return New(BadRequest, "%s must be one JSON value; more follows at byte %d", o.subject, dec.InputOffset())
	}
	return nil
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// FromJSON translates an error of encoding/json (json.Unmarshal or a
// json.Decoder) decoding data into a value of type target into an *Error,
// as Decode does. data and target may be nil; the sentence then says less.
// An *Error in err's chain is returned as is; any other error (one from a
// custom UnmarshalJSON or UnmarshalText) is a 400 with a generic sentence.
func FromJSON(err error, data []byte, target reflect.Type) *Error {
	return fromJSON(err, data, target, "the body", "")
}

func fromJSON(err error, data []byte, target reflect.Type, subject, within string) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	var ie *json.InvalidUnmarshalError
	switch {
	case errors.As(err, &te):
		return typeError(te, subject, within).WithCause(err)
	case errors.As(err, &se):
		if se.Error() == "unexpected end of JSON input" { // json.Unmarshal's io.ErrUnexpectedEOF
			return New(BadRequest, "%s is not valid JSON: it ends early, at byte %d", subject, se.Offset).WithCause(err)
		}
		return syntaxError(se.Offset, data, subject).WithCause(err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return New(BadRequest, "%s is not valid JSON: it ends early, at byte %d", subject, len(data)).WithCause(err)
	case errors.Is(err, io.EOF):
		return New(BadRequest, "%s is empty; it must be %s", subject, want(target)).WithCause(err)
	case errors.As(err, &ie):
		return New(Internal, "%s", Text(Internal)).WithCause(err)
	}
	if name, ok := strings.CutPrefix(err.Error(), `json: unknown field `); ok {
		if f, uerr := strconv.Unquote(name); uerr == nil {
			return New(BadRequest, "%s has an unknown field %q", subject, f).WithCause(err)
		}
		return New(BadRequest, "%s has an unknown field", subject).WithCause(err)
	}
	return New(BadRequest, "%s has a value that is not valid for this request", subject).WithCause(err)
}

// syntaxError is the sentence of a JSON syntax error found after reading
// offset bytes of data: the offending character is the last one read.
func syntaxError(offset int64, data []byte, subject string) *Error {
	if offset < 1 || offset > int64(len(data)) {
		return New(BadRequest, "%s is not valid JSON (at byte %d)", subject, offset)
	}
	i := offset - 1
	for i > 0 && offset-i < utf8.UTFMax && !utf8.RuneStart(data[i]) {
		i--
	}
	r, _ := utf8.DecodeRune(data[i:])
	ch := string(r)
	if r == utf8.RuneError {
		ch = fmt.Sprintf("byte 0x%02x", data[offset-1])
		return New(BadRequest, "%s is not valid JSON: unexpected %s at byte %d", subject, ch, offset-1)
	}
	return New(BadRequest, "%s is not valid JSON: unexpected %q at byte %d", subject, ch, i)
}

// typeError is the sentence of a JSON value of the wrong kind: `"path"
// must be <kind>, got <kind>`.
func typeError(te *json.UnmarshalTypeError, subject, within string) *Error {
	switch {
	case te.Field != "" && within != "":
		subject = strconv.Quote(within + "." + jsonPath(te.Field))
	case te.Field != "":
		subject = strconv.Quote(jsonPath(te.Field))
	}
	var inner *Error
	if errors.As(te.Err, &inner) {
		return New(BadRequest, "%s %s", subject, inner.Message)
	}
	return New(BadRequest, "%s must be %s, got %s", subject, want(te.Type), got(te.Value, te.Type))
}

// jsonPath turns encoding/json's field path ("messages.1.parts.0.text")
// into the JSON path a client reads ("messages[1].parts[0].text").
func jsonPath(field string) string {
	parts := strings.Split(field, ".")
	var b strings.Builder
	for i, p := range parts {
		if _, err := strconv.ParseUint(p, 10, 64); err == nil && i > 0 {
			b.WriteString("[" + p + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}

// want describes what a Go type accepts, in JSON's words.
func want(t reflect.Type) string {
	if t == nil {
		return "a JSON value"
	}
	for t.Kind() == reflect.Pointer {
		if t.Implements(textUnmarshaler) {
			return "a string"
		}
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(textUnmarshaler) {
		return "a string"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "a whole number of 0 or more"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "an array"
	case reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a JSON value"
}

// got describes the JSON value encoding/json found ("number", "number
// 1.5", "string", "bool", "array", "object") for a target of type t.
func got(value string, t reflect.Type) string {
	switch value {
	case "string":
		return "a string"
	case "number":
		return "a number"
	case "bool":
		return "true or false"
	case "array":
		return "an array"
	case "object":
		return "an object"
	case "null":
		return "null"
	}
	n, ok := strings.CutPrefix(value, "number ")
	if !ok || !isNumber(n) {
		return "another kind of value"
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && !strings.ContainsAny(n, ".eE") {
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			if !strings.HasPrefix(n, "-") || t.Kind() < reflect.Uint {
				return n + ", which is out of range"
			}
		}
	}
	if t != nil && (t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64) {
		return n + ", which is out of range"
	}
	return n
}

// isNumber reports whether s is made of the characters of a JSON number,
// so it can be echoed as is.
func isNumber(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
		default:
			return false
		}
	}
	return true
}
