package replay

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/apierror"
)

// Cursor is the position of a chunk in the log: the stream sequence of the
// chunk's (last) event in the chunks stream. Sequences grow across every
// agent's streams, so a cursor from an older stream of the same agent is
// below every chunk of a newer one. Zero means "before the first chunk".
//
// Resuming after a cursor yields the chunks stored after it: replay is
// modelled on jetstream's ordered consumer, which resumes at streamSeq+1.
//
// Clients see a cursor as a string of decimal digits everywhere (SSE ids,
// WebSocket frames, JSON replies): a uint64 does not fit a JSON number a
// JavaScript client reads exactly past 2^53. MarshalJSON writes that
// string; UnmarshalJSON reads it, and a JSON number too, for clients and
// servers that still send one.
type Cursor eventlog.Seq

var (
	_ json.Marshaler           = Cursor(0)
	_ json.Unmarshaler         = (*Cursor)(nil)
	_ encoding.TextMarshaler   = Cursor(0)
	_ encoding.TextUnmarshaler = (*Cursor)(nil)
)

// MarshalJSON encodes c as a JSON string of digits: "42".
func (c Cursor) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 22)
	b = append(b, '"')
	b = strconv.AppendUint(b, uint64(c), 10)
	return append(b, '"'), nil
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
	return apierror.New(apierror.BadRequest, `a cursor must be a string of digits such as "42" (at most 18446744073709551615), got %s`, got).WithCause(ErrBadCursor)
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

// MarshalText formats c in decimal, as String does.
func (c Cursor) MarshalText() ([]byte, error) { return strconv.AppendUint(nil, uint64(c), 10), nil }

// UnmarshalText parses a decimal cursor, as ParseCursor does (for flags and
// environment variables).
func (c *Cursor) UnmarshalText(b []byte) error {
	v, err := ParseCursor(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// String formats the cursor in decimal, as sent in SSE id: lines.
func (c Cursor) String() string { return strconv.FormatUint(uint64(c), 10) }

// Seq returns the cursor as a log sequence.
func (c Cursor) Seq() eventlog.Seq { return eventlog.Seq(c) }

// ErrBadCursor is returned by ParseCursor (and the gateway, as 400) for a
// cursor that is not a decimal stream sequence.
var ErrBadCursor = errors.New("replay: invalid cursor")

// ParseCursor parses a decimal stream sequence, as String formats it. An
// empty string, a sign, spaces, or a number above 2^64-1 is an error
// wrapping ErrBadCursor.
func ParseCursor(s string) (Cursor, error) {
	bad := func() error {
		q := s
		if len(q) > 64 {
			q = q[:64] + "..."
		}
		return fmt.Errorf("%w %q: want a decimal stream sequence", ErrBadCursor, q)
	}
	if s == "" || len(s) > 20 {
		return 0, bad()
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, bad()
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, bad()
	}
	return Cursor(n), nil
}
