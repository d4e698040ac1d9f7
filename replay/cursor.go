package replay

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/apierror"
)

// Cursor is the position of a chunk in the log: the stream sequence of the
// chunk's record in the chunks stream (of its last part when the chunk was
// split), and, for a chunk inside a packed record (chunk.EventChunks) that
// is not the record's last, its place in the record. Sequences grow across
// every agent's streams, so a cursor from an older stream of the same
// agent is below every chunk of a newer one. The zero Cursor means "before
// the first chunk".
//
// Resuming after a cursor yields the chunks stored after it: replay is
// modelled on jetstream's ordered consumer, which resumes at streamSeq+1;
// after a cursor inside a packed record, it resumes with the record's
// next chunk.
//
// Clients see a cursor as a string everywhere (SSE ids, WebSocket frames,
// JSON replies): the record's sequence in decimal digits ("42": after the
// whole record, so what it meant before records were packed), or
// "<sequence>.<k>" for chunk k (from 0) of a packed record that is not its
// last ("42.1": after the record's second chunk). A uint64 does not fit a
// JSON number a JavaScript client reads exactly past 2^53. MarshalJSON
// writes that string; UnmarshalJSON reads it, and a JSON number of digits
// too, for clients and servers that still send one.
type Cursor struct {
	seq eventlog.Seq
	// in is 0 for the whole record seq, k+1 for its chunk k.
	in uint32
}

// CursorAt returns the cursor after the whole record at seq: every chunk
// it holds.
func CursorAt(seq eventlog.Seq) Cursor { return Cursor{seq: seq} }

// CursorIn returns the cursor after chunk k (from 0) of the packed record
// at seq: resuming there yields the record's chunks after k. Use CursorAt
// for the record's last chunk, so the cursor reads as before packing.
func CursorIn(seq eventlog.Seq, k int) Cursor {
	if k < 0 || k >= maxInRecord || seq == 0 {
		return Cursor{seq: seq}
	}
	return Cursor{seq: seq, in: uint32(k) + 1}
}

// maxInRecord bounds a chunk's place in a record a cursor can name.
const maxInRecord = 1 << 30

// Inside reports whether the cursor is inside a packed record, and after
// which of its chunks (from 0).
func (c Cursor) Inside() (k int, ok bool) {
	if c.in == 0 {
		return 0, false
	}
	return int(c.in) - 1, true
}

// IsZero reports whether c is the cursor before the first chunk.
func (c Cursor) IsZero() bool { return c == Cursor{} }

// Compare returns -1, 0 or +1 as c is before, at or after d: by sequence,
// then by place in the record, the whole record last.
func (c Cursor) Compare(d Cursor) int {
	if c.seq != d.seq {
		if c.seq < d.seq {
			return -1
		}
		return 1
	}
	ci, di := uint64(c.in)-1, uint64(d.in)-1 // the whole record (0) wraps to the top
	switch {
	case ci < di:
		return -1
	case ci > di:
		return 1
	}
	return 0
}

var (
	_ json.Marshaler           = Cursor{}
	_ json.Unmarshaler         = (*Cursor)(nil)
	_ encoding.TextMarshaler   = Cursor{}
	_ encoding.TextUnmarshaler = (*Cursor)(nil)
)

// MarshalJSON encodes c as a JSON string: "42", or "42.1" inside a
// packed record.
func (c Cursor) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 34)
	b = append(b, '"')
	b = c.AppendText(b)
	return append(b, '"'), nil
}

// AppendText appends c as String formats it.
func (c Cursor) AppendText(b []byte) []byte {
	b = strconv.AppendUint(b, uint64(c.seq), 10)
	if k, ok := c.Inside(); ok {
		b = append(b, '.')
		b = strconv.AppendInt(b, int64(k), 10)
	}
	return b
}

// UnmarshalJSON decodes a cursor sent as a JSON string of digits ("42") or,
// for compatibility, as a JSON number of digits (42); null leaves c as it
// is. Anything else is a 400 *apierror.Error wrapping ErrBadCursor.
func (c *Cursor) UnmarshalJSON(b []byte) error {
	s := string(b)
	var got string
	switch {
	case s == "null":
		return nil
	case len(s) > 0 && s[0] == '"':
		var str string
		if json.Unmarshal(b, &str) != nil {
			return badCursorJSON("a string that is not valid JSON")
		}
		s, got = str, strconv.Quote(echo(str))
	case len(s) > 0 && (s[0] == '-' || s[0] >= '0' && s[0] <= '9'):
		got = "the number " + echo(s)
		if !isNumber(s) {
			got = "a number that is not valid JSON"
		}
		if strings.Contains(s, ".") {
			// A cursor inside a record is sent as a string only.
			return badCursorJSON(got)
		}
	case len(s) > 0 && s[0] == '[':
		return badCursorJSON("an array")
	case len(s) > 0 && s[0] == '{':
		return badCursorJSON("an object")
	case s == "true" || s == "false":
		return badCursorJSON(s)
	default:
		return badCursorJSON("a value that is not valid JSON")
	}
	v, err := ParseCursor(s)
	if err != nil {
		return badCursorJSON(got)
	}
	*c = v
	return nil
}

// badCursorJSON is the error of a JSON cursor that is not one; got
// describes what was sent.
func badCursorJSON(got string) error {
	return apierror.New(apierror.BadRequest, `a cursor must be a string of digits such as "42" (at most 18446744073709551615), or "42.1" inside a record, got %s`, got).WithCause(ErrBadCursor)
}

// isNumber reports whether s is made of the characters of a JSON number.
func isNumber(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
		default:
			return false
		}
	}
	return true
}

// MarshalText formats c as String does.
func (c Cursor) MarshalText() ([]byte, error) { return c.AppendText(nil), nil }

// UnmarshalText parses a cursor, as ParseCursor does (for flags and
// environment variables).
func (c *Cursor) UnmarshalText(b []byte) error {
	v, err := ParseCursor(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// String formats the cursor as sent in SSE id: lines: the record's
// sequence in decimal, then ".<k>" inside a packed record.
func (c Cursor) String() string { return string(c.AppendText(nil)) }

// Seq returns the sequence of the cursor's record.
func (c Cursor) Seq() eventlog.Seq { return c.seq }

// ErrBadCursor is returned by ParseCursor (and the gateway, as 400) for a
// cursor that is not a decimal stream sequence.
var ErrBadCursor = errors.New("replay: invalid cursor")

// ParseCursor parses a cursor as String formats it: a decimal stream
// sequence, optionally followed by "." and a chunk's place in a packed
// record. An empty string, a sign, spaces, a number above 2^64-1, or a
// place inside sequence 0 (which holds no record) is an error wrapping
// ErrBadCursor.
func ParseCursor(s string) (Cursor, error) {
	bad := func() error {
		q := s
		if len(q) > 64 {
			q = q[:64] + "..."
		}
		return fmt.Errorf("%w %q: want a decimal stream sequence", ErrBadCursor, q)
	}
	seqPart, inPart, inside := strings.Cut(s, ".")
	digits := func(s string, most int) bool {
		if s == "" || len(s) > most {
			return false
		}
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return false
			}
		}
		return true
	}
	// Sequence 0 holds no record, so nothing is inside it: "0.k" would sort
	// before the zero cursor, which is the start.
	if !digits(seqPart, 20) || inside && (!digits(inPart, 10) || strings.Trim(seqPart, "0") == "") {
		return Cursor{}, bad()
	}
	n, err := strconv.ParseUint(seqPart, 10, 64)
	if err != nil {
		return Cursor{}, bad()
	}
	c := Cursor{seq: eventlog.Seq(n)}
	if inside {
		k, err := strconv.ParseUint(inPart, 10, 32)
		if err != nil || k >= maxInRecord {
			return Cursor{}, bad()
		}
		c.in = uint32(k) + 1
	}
	return c, nil
}

// maxCursor returns the later of a and b.
func maxCursor(a, b Cursor) Cursor {
	if a.Compare(b) >= 0 {
		return a
	}
	return b
}
