package replay_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/apierror"
	"github.com/forever-agents/forever/internal/apierror/apierrortest"
	"github.com/forever-agents/forever/replay"
)

func TestParseCursor(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want replay.Cursor
		ok   bool
	}{
		{"zero", "0", replay.CursorAt(0), true},
		{"small", "42", replay.CursorAt(42), true},
		{"max", "18446744073709551615", replay.CursorAt(1<<64 - 1), true},
		{"leading zeros", "007", replay.CursorAt(7), true},
		{"inside a record", "42.0", replay.CursorIn(42, 0), true},
		{"inside a record, later", "42.17", replay.CursorIn(42, 17), true},
		{"empty", "", replay.Cursor{}, false},
		{"letters", "abc", replay.Cursor{}, false},
		{"sign", "+1", replay.Cursor{}, false},
		{"negative", "-1", replay.Cursor{}, false},
		{"space", " 1", replay.Cursor{}, false},
		{"overflow", "18446744073709551616", replay.Cursor{}, false},
		{"hex", "0x10", replay.Cursor{}, false},
		{"dot alone", "42.", replay.Cursor{}, false},
		{"no sequence", ".1", replay.Cursor{}, false},
		{"two dots", "42.1.2", replay.Cursor{}, false},
		{"negative place", "42.-1", replay.Cursor{}, false},
		{"place too large", "42.99999999999", replay.Cursor{}, false},
		{"inside sequence 0, which holds no record", "0.0", replay.Cursor{}, false},
		{"inside sequence 0, with leading zeros", "000.3", replay.Cursor{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := replay.ParseCursor(tt.in)
			if tt.ok {
				if err != nil || got != tt.want {
					t.Fatalf("ParseCursor(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
				}
				return
			}
			if !errors.Is(err, replay.ErrBadCursor) {
				t.Fatalf("ParseCursor(%q) err = %v, want ErrBadCursor", tt.in, err)
			}
		})
	}
	_, err := replay.ParseCursor("abc")
	if got, want := err.Error(), `replay: invalid cursor "abc": want a decimal stream sequence`; got != want {
		t.Fatalf("error = %q, want %q", got, want)
	}
}

func FuzzParseCursor(f *testing.F) {
	for _, s := range []string{"0", "1", "18446744073709551615", "18446744073709551616", "", "abc", "-1", "1e3", " 7", "5.0", "5.3", "5.", ".5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := replay.ParseCursor(s)
		if err != nil {
			if !errors.Is(err, replay.ErrBadCursor) {
				t.Fatalf("ParseCursor(%q): error %v does not wrap ErrBadCursor", s, err)
			}
			return
		}
		// A parsed cursor formats back to the same numbers.
		seq, in, inside := strings.Cut(s, ".")
		n, perr := strconv.ParseUint(seq, 10, 64)
		if perr != nil || c.Seq() != eventlog.Seq(n) {
			t.Fatalf("ParseCursor(%q) = %v, strconv says %d, %v", s, c, n, perr)
		}
		k, ok := c.Inside()
		if ok != inside {
			t.Fatalf("ParseCursor(%q) = %v: inside %v", s, c, ok)
		}
		if inside {
			if m, err := strconv.ParseUint(in, 10, 32); err != nil || uint64(k) != m {
				t.Fatalf("ParseCursor(%q) = %v, strconv says %d, %v", s, c, m, err)
			}
		}
		back, err := replay.ParseCursor(c.String())
		if err != nil || back != c {
			t.Fatalf("round trip of %v: %v, %v", c, back, err)
		}
	})
}

// TestCursorJSON: a cursor is a JSON string of digits on the way out, so a
// JavaScript client reads it exactly past 2^53; on the way in, a string or
// (for old peers) a number of digits is read, anything else is a 400 that
// names no Go type.
func TestCursorJSON(t *testing.T) {
	type reply struct {
		Cursor replay.Cursor `json:"cursor"`
	}
	big := replay.CursorAt(1<<53 + 1)
	b, err := json.Marshal(reply{big})
	if err != nil || string(b) != `{"cursor":"9007199254740993"}` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	for in, want := range map[string]replay.Cursor{
		`{"cursor":"9007199254740993"}`:     big,
		`{"cursor":9007199254740993}`:       big,
		`{"cursor":"18446744073709551615"}`: replay.CursorAt(1<<64 - 1),
		`{"cursor":0}`:                      replay.CursorAt(0),
		`{"cursor":null}`:                   replay.CursorAt(7),
		`{"cursor":"12.3"}`:                 replay.CursorIn(12, 3),
	} {
		r := reply{replay.CursorAt(7)}
		if err := json.Unmarshal([]byte(in), &r); err != nil || r.Cursor != want {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", in, r.Cursor, err, want)
		}
	}
	for _, in := range []string{`"abc"`, `"-1"`, `-1`, `1.5`, `1e3`, `"18446744073709551616"`, `18446744073709551616`, `true`, `[]`, `{}`, `""`, `" 1"`} {
		var r reply
		err := json.Unmarshal([]byte(`{"cursor":`+in+`}`), &r)
		var e *apierror.Error
		if !errors.As(err, &e) || e.Code != 400 || !errors.Is(err, replay.ErrBadCursor) {
			t.Errorf("Unmarshal(%s) = %v, want a 400 wrapping ErrBadCursor", in, err)
			continue
		}
		apierrortest.CheckMessage(t, in, e.Message)
	}
	var c replay.Cursor
	if err := c.UnmarshalText([]byte("42")); err != nil || c != replay.CursorAt(42) {
		t.Fatalf("UnmarshalText = %v, %v", c, err)
	}
	if b, _ := c.MarshalText(); string(b) != "42" {
		t.Fatalf("MarshalText = %s", b)
	}
}

// TestCursorOrder: cursors order by record, and inside a record by chunk,
// the whole record (its last chunk's cursor) after every chunk in it; a
// plain cursor reads as it did before records were packed.
func TestCursorOrder(t *testing.T) {
	in := []replay.Cursor{{}, replay.CursorAt(1), replay.CursorIn(2, 0), replay.CursorIn(2, 1), replay.CursorAt(2), replay.CursorIn(3, 5), replay.CursorAt(3)}
	for i, a := range in {
		for j, b := range in {
			want := 0
			switch {
			case i < j:
				want = -1
			case i > j:
				want = 1
			}
			if got := a.Compare(b); got != want {
				t.Errorf("%v.Compare(%v) = %d, want %d", a, b, got, want)
			}
		}
	}
	if s := replay.CursorIn(2, 1).String(); s != "2.1" {
		t.Errorf("String = %q", s)
	}
	if s := replay.CursorAt(2).String(); s != "2" {
		t.Errorf("String = %q", s)
	}
	if k, ok := replay.CursorAt(2).Inside(); ok {
		t.Errorf("CursorAt(2).Inside() = %d, true", k)
	}
}

// FuzzCursorJSON: any JSON value decodes to a cursor that encodes back to
// the same digits, or to a 400 naming no Go type; a cursor always encodes
// as a string of digits.
func FuzzCursorJSON(f *testing.F) {
	for _, s := range []string{`"42"`, `42`, `null`, `"x"`, `-1`, `1.5`, `[]`, `"\u0031"`, `18446744073709551616`, `"007"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var c replay.Cursor
		err := c.UnmarshalJSON(data)
		if err != nil {
			var e *apierror.Error
			if !errors.As(err, &e) || e.Code != 400 || !errors.Is(err, replay.ErrBadCursor) {
				t.Fatalf("UnmarshalJSON(%q) = %v", data, err)
			}
			apierrortest.CheckMessage(t, string(data), e.Message)
			return
		}
		out, _ := c.MarshalJSON()
		var s string
		if json.Unmarshal(out, &s) != nil || s != c.String() {
			t.Fatalf("cursor %v encodes as %s", c, out)
		}
		var back replay.Cursor
		if err := back.UnmarshalJSON(out); err != nil || back != c {
			t.Fatalf("round trip of %s: %v, %v", out, back, err)
		}
	})
}
