package replay

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/forever-agents/forever/eventlog"
)

// Cursor is the position of a chunk in the log: the stream sequence of the
// chunk's (last) event in the chunks stream. Sequences grow across every
// agent's streams, so a cursor from an older stream of the same agent is
// below every chunk of a newer one. Zero means "before the first chunk".
//
// Resuming after a cursor yields the chunks stored after it: replay is
// modelled on jetstream's ordered consumer, which resumes at streamSeq+1.
type Cursor eventlog.Seq

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
