package fiber

import (
	"encoding/json"
	"strconv"

	"github.com/forever-agents/forever/internal/jsonstr"
)

// The runs view writes a Row at every fiber.stashed and every op.completed
// with a snapshot, and an Op at every op event: about four rows a chat tool
// call. json.Marshal reached their fields through reflection and copied
// each raw snapshot and result again to compact it, a third of the view's
// apply. appendRow and appendOp build the same bytes by hand (the row
// format does not change: TestRowJSONEqualsMarshal compares them), and
// fall back to json.Marshal for anything they cannot copy as it is.

// verbatim reports whether json.Marshal writes raw, a valid JSON value, as
// it is: no whitespace to compact, no character it escapes (<, >, &,
// U+2028, U+2029), and, to stay clear of any rewriting of escapes or
// invalid UTF-8, only ASCII without backslashes.
func verbatim(raw []byte) bool {
	for _, c := range raw {
		if c <= ' ' || c >= 0x80 || c == '<' || c == '>' || c == '&' || c == '\\' {
			return false
		}
	}
	return true
}

// encodeRow returns json.Marshal(r). REQUIRES: r.Snapshot, when set, is
// valid JSON (it was decoded from an event or a row).
func encodeRow(r Row) ([]byte, error) {
	created, err := r.CreatedAt.MarshalJSON()
	if err != nil || !verbatim(r.Snapshot) {
		return json.Marshal(r)
	}
	b := make([]byte, 0, 160+len(r.ID)+len(r.Agent)+len(r.Name)+len(r.Snapshot)+len(r.TraceParent))
	b = append(b, `{"id":`...)
	b = jsonstr.Append(b, r.ID)
	b = append(b, `,"agent":`...)
	b = jsonstr.Append(b, r.Agent)
	b = append(b, `,"name":`...)
	b = jsonstr.Append(b, r.Name)
	if len(r.Snapshot) > 0 {
		b = append(b, `,"snapshot":`...)
		b = append(b, r.Snapshot...)
	}
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(r.Attempt), 10)
	if r.Recoveries != 0 {
		b = append(b, `,"recoveries":`...)
		b = strconv.AppendInt(b, int64(r.Recoveries), 10)
	}
	b = append(b, `,"createdAt":`...)
	b = append(b, created...)
	if r.TraceParent != "" {
		b = append(b, `,"traceparent":`...)
		b = jsonstr.Append(b, r.TraceParent)
	}
	if r.Version != "" {
		b = append(b, `,"version":`...)
		b = jsonstr.Append(b, r.Version)
	}
	if r.LastVersion != "" {
		b = append(b, `,"lastVersion":`...)
		b = jsonstr.Append(b, r.LastVersion)
	}
	if r.Restarted {
		b = append(b, `,"restarted":true`...)
	}
	return append(b, '}'), nil
}

// encodeOp returns json.Marshal(o). REQUIRES: o.Result, when set, is
// valid JSON.
func encodeOp(o Op) ([]byte, error) {
	if !verbatim(o.Result) {
		return json.Marshal(o)
	}
	b := make([]byte, 0, 64+len(o.ID)+len(o.Fiber)+len(o.Key)+len(o.Result))
	b = append(b, `{"id":`...)
	b = jsonstr.Append(b, o.ID)
	b = append(b, `,"fiber":`...)
	b = jsonstr.Append(b, o.Fiber)
	b = append(b, `,"key":`...)
	b = jsonstr.Append(b, o.Key)
	b = append(b, `,"completed":`...)
	b = strconv.AppendBool(b, o.Completed)
	if len(o.Result) > 0 {
		b = append(b, `,"result":`...)
		b = append(b, o.Result...)
	}
	return append(b, '}'), nil
}

// rowFields are Row's JSON names, in encodeRow's order.
var rowFields = [...]string{"id", "agent", "name", "snapshot", "attempt", "recoveries", "createdAt", "traceparent", "version", "lastVersion", "restarted"}

// fastRow decodes v into r as json.Unmarshal would, and returns false, r
// changed or not, for anything other than the fields in encodeRow's order
// and form (then the caller uses json.Unmarshal). The runs view reads the
// fiber's row at every fiber.stashed and every op.completed with a
// snapshot.
func fastRow(v []byte, r *Row) bool {
	next := 0
	return eachField(v, func(name string, b []byte) (rest []byte, ok bool) {
		k := next
		for k < len(rowFields) && rowFields[k] != name {
			k++
		}
		if k == len(rowFields) {
			return nil, false
		}
		next = k + 1
		switch k {
		case 3:
			r.Snapshot, rest, ok = readRaw(b)
		case 4:
			r.Attempt, rest, ok = readInt(b)
		case 5:
			r.Recoveries, rest, ok = readInt(b)
		case 6:
			r.CreatedAt, rest, ok = readTime(b)
		case 10:
			r.Restarted, rest, ok = readBool(b)
		default:
			strs := [...]*string{0: &r.ID, 1: &r.Agent, 2: &r.Name, 7: &r.TraceParent, 8: &r.Version, 9: &r.LastVersion, 10: nil}
			var s string
			if s, rest, ok = jsonstr.Read(b); ok {
				*strs[k] = s
			}
		}
		return rest, ok
	})
}
