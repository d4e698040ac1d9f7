package jsonstr

import (
	"encoding/json"
	"testing"
)

// TestValueEnd: ValueEnd finds the end of each kind of value, strings with
// escaped quotes and brackets inside them included.
func TestValueEnd(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{`"a"`, 3}, {`"a\"b",`, 6}, {`"\\"x`, 4}, {`{"a":"}"},`, 9}, {`[1,[2,{"x":"]"}]]}`, 17}, {`12,`, 2}, {`-1.5e3}`, 6},
		{`true]`, 4}, {`null`, 4}, {``, 0}, {`"open`, 0}, {`{"a":1`, 0}, {`{"a":"\"}"}`, 11},
	} {
		if got := ValueEnd([]byte(c.in)); got != c.want {
			t.Errorf("ValueEnd(%s) = %d, want %d", c.in, got, c.want)
		}
	}
}

// FuzzValueEnd: for a valid JSON value followed by a comma, ValueEnd finds
// the value's end.
func FuzzValueEnd(f *testing.F) {
	for _, s := range []string{`"a"`, `{"a":[1,"]",{}]}`, `3.5`, `false`, `"\"\\"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !json.Valid([]byte(s)) || s == "" || s[0] <= ' ' || s[len(s)-1] <= ' ' {
			return
		}
		if got := ValueEnd([]byte(s + `,"x"`)); got != len(s) {
			t.Fatalf("ValueEnd(%s,...) = %d, want %d", s, got, len(s))
		}
	})
}
