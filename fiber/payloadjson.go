package fiber

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"

	"github.com/forever-agents/forever/internal/jsonstr"
)

// A chat tool call writes two or three of the package's events and the
// runs view decodes each (applyRuns): json.Marshal and json.Unmarshal of
// payload, through reflection over its sixteen fields, were a quarter of
// the view's apply. encodePayload writes the same bytes by hand, and
// decodePayload reads what it writes; both leave anything else to
// encoding/json (TestPayloadJSONEqualsMarshal, FuzzPayloadDecode).

// encodePayload returns json.Marshal(p), and its error for a raw field
// that is not valid JSON.
func encodePayload(p payload) ([]byte, error) {
	var created []byte
	if p.CreatedAt != nil {
		var err error
		if created, err = p.CreatedAt.MarshalJSON(); err != nil {
			return json.Marshal(p)
		}
	}
	if !verbatimValid(p.Snapshot) || !verbatimValid(p.Result) {
		return json.Marshal(p)
	}
	b := make([]byte, 0, 64+len(p.ID)+len(p.Name)+len(created)+len(p.Snapshot)+len(p.Result)+len(p.Error)+len(p.Reason)+
		len(p.Fiber)+len(p.OpID)+len(p.Key)+len(p.NextOpID)+len(p.NextKey)+len(p.TraceParent)+len(p.Version)+16*12)
	b = append(b, '{')
	str := func(name, v string) {
		if v != "" {
			b = field(b, name)
			b = jsonstr.Append(b, v)
		}
	}
	raw := func(name string, v []byte) {
		if len(v) > 0 {
			b = field(b, name)
			b = append(b, v...)
		}
	}
	str("id", p.ID)
	str("name", p.Name)
	raw("createdAt", created)
	raw("snapshot", p.Snapshot)
	raw("result", p.Result)
	str("error", p.Error)
	if p.Attempt != 0 {
		b = field(b, "attempt")
		b = strconv.AppendInt(b, int64(p.Attempt), 10)
	}
	if p.Attempts != nil {
		b = field(b, "attempts")
		b = strconv.AppendInt(b, int64(*p.Attempts), 10)
	}
	str("reason", p.Reason)
	str("fiber", p.Fiber)
	str("opId", p.OpID)
	str("key", p.Key)
	str("nextOpId", p.NextOpID)
	str("nextKey", p.NextKey)
	str("traceparent", p.TraceParent)
	str("version", p.Version)
	if p.Restart {
		b = field(b, "restart")
		b = append(b, "true"...)
	}
	return append(b, '}'), nil
}

// field appends the name of the next field of an object begun in b.
func field(b []byte, name string) []byte {
	if b[len(b)-1] != '{' {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	return append(b, '"', ':')
}

// verbatimValid reports whether json.Marshal writes raw as it is (verbatim)
// and raw is valid JSON, or raw is empty.
func verbatimValid(raw []byte) bool {
	return len(raw) == 0 || verbatim(raw) && json.Valid(raw)
}

// decodePayload decodes data into p as json.Unmarshal would, and returns
// false, p changed or not, for anything other than the fields in
// encodePayload's order and form; the caller then uses json.Unmarshal.
func decodePayload(data []byte, p *payload) bool {
	next := 0 // the index in payloadFields the next field may be at or after
	return eachField(data, func(name string, b []byte) ([]byte, bool) {
		k := next
		for k < len(payloadFields) && payloadFields[k] != name {
			k++
		}
		if k == len(payloadFields) {
			return nil, false // unknown, repeated or out of order
		}
		next = k + 1
		return decodeField(p, k, b)
	})
}

// eachField calls field with the name of each field of the JSON object in
// data and the bytes after its colon; field decodes the value there and
// returns the bytes after it. eachField reports false as soon as field
// does, or data is not an object written compactly with names that
// jsonstr.Read reads. When field only accepts valid values, whatever
// eachField accepts is valid JSON.
func eachField(data []byte, field func(name string, b []byte) ([]byte, bool)) bool {
	b, ok := jsonstr.Cut(data, "{")
	if !ok {
		return false
	}
	if len(b) == 1 && b[0] == '}' {
		return true
	}
	for {
		name, rest, ok := jsonstr.Read(b)
		if !ok || len(rest) == 0 || rest[0] != ':' {
			return false
		}
		if b, ok = field(name, rest[1:]); !ok || len(b) == 0 {
			return false
		}
		switch b[0] {
		case ',':
			b = b[1:]
		case '}':
			return len(b) == 1
		default:
			return false
		}
	}
}

// readRaw returns the JSON value at the start of b, copied, and the rest
// of b; ok is false for null (json.Unmarshal keeps it as "null" in a
// json.RawMessage, and as nothing elsewhere) and for anything not valid.
func readRaw(b []byte) (v, rest []byte, ok bool) {
	n := jsonstr.ValueEnd(b)
	if n == 0 || bytes.HasPrefix(b, []byte("null")) || !json.Valid(b[:n]) {
		return nil, nil, false
	}
	return bytes.Clone(b[:n]), b[n:], true
}

// readInt returns the integer at the start of b and the rest of b.
func readInt(b []byte) (int, []byte, bool) {
	n := jsonstr.ValueEnd(b)
	if n == 0 || !plainInt(b[:n]) {
		return 0, nil, false
	}
	v, err := strconv.Atoi(string(b[:n]))
	return v, b[n:], err == nil
}

// readTime returns the time at the start of b, as time.Time's
// UnmarshalJSON reads it, and the rest of b.
func readTime(b []byte) (time.Time, []byte, bool) {
	var t time.Time
	n := jsonstr.ValueEnd(b)
	if n == 0 || b[0] != '"' || t.UnmarshalJSON(b[:n]) != nil {
		return time.Time{}, nil, false
	}
	return t, b[n:], true
}

// readBool returns the boolean at the start of b and the rest of b.
func readBool(b []byte) (bool, []byte, bool) {
	if rest, ok := jsonstr.Cut(b, "true"); ok {
		return true, rest, true
	}
	if rest, ok := jsonstr.Cut(b, "false"); ok {
		return false, rest, true
	}
	return false, nil, false
}

// payloadFields are payload's JSON names, in encodePayload's order.
var payloadFields = [...]string{"id", "name", "createdAt", "snapshot", "result", "error", "attempt", "attempts",
	"reason", "fiber", "opId", "key", "nextOpId", "nextKey", "traceparent", "version", "restart"}

// decodeField decodes the value at the start of b into field k of p and
// returns the rest of b.
func decodeField(p *payload, k int, b []byte) (rest []byte, ok bool) {
	switch k {
	case 2: // createdAt
		var t time.Time
		if t, rest, ok = readTime(b); ok {
			p.CreatedAt = &t
		}
		return rest, ok
	case 3:
		p.Snapshot, rest, ok = readRaw(b)
		return rest, ok
	case 4:
		p.Result, rest, ok = readRaw(b)
		return rest, ok
	case 6:
		p.Attempt, rest, ok = readInt(b)
		return rest, ok
	case 7:
		var n int
		if n, rest, ok = readInt(b); ok {
			p.Attempts = &n
		}
		return rest, ok
	case 16:
		p.Restart, rest, ok = readBool(b)
		return rest, ok
	}
	strs := [...]*string{0: &p.ID, 1: &p.Name, 5: &p.Error, 8: &p.Reason, 9: &p.Fiber, 10: &p.OpID, 11: &p.Key,
		12: &p.NextOpID, 13: &p.NextKey, 14: &p.TraceParent, 15: &p.Version}
	s, rest, ok := jsonstr.Read(b)
	if ok {
		*strs[k] = s
	}
	return rest, ok
}

// plainInt reports whether b is an integer as JSON writes one: digits
// after an optional minus, no leading zero.
func plainInt(b []byte) bool {
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 1 && b[0] == '0' {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
