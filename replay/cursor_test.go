package replay_test

import (
	"errors"
	"strconv"
	"testing"

	"github.com/forever-agents/forever/replay"
)

func TestParseCursor(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want replay.Cursor
		ok   bool
	}{
		{"zero", "0", 0, true},
		{"small", "42", 42, true},
		{"max", "18446744073709551615", 1<<64 - 1, true},
		{"leading zeros", "007", 7, true},
		{"empty", "", 0, false},
		{"letters", "abc", 0, false},
		{"sign", "+1", 0, false},
		{"negative", "-1", 0, false},
		{"space", " 1", 0, false},
		{"overflow", "18446744073709551616", 0, false},
		{"hex", "0x10", 0, false},
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
	for _, s := range []string{"0", "1", "18446744073709551615", "18446744073709551616", "", "abc", "-1", "1e3", " 7"} {
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
		// A parsed cursor formats back to the same number.
		n, perr := strconv.ParseUint(s, 10, 64)
		if perr != nil || replay.Cursor(n) != c {
			t.Fatalf("ParseCursor(%q) = %v, strconv says %d, %v", s, c, n, perr)
		}
		back, err := replay.ParseCursor(c.String())
		if err != nil || back != c {
			t.Fatalf("round trip of %v: %v, %v", c, back, err)
		}
	})
}
