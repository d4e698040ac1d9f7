package jsonstr

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzAppend: Append writes exactly what json.Marshal writes for a string.
func FuzzAppend(f *testing.F) {
	for _, s := range []string{"", "plain", `q"uote`, `back\slash`, "tab\t", "é", "<&>", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := Append([]byte("x"), s); string(got) != "x"+string(want) {
			t.Fatalf("Append(%q) = %s, want x%s", s, got, want)
		}
	})
}

// FuzzRead: whenever Read accepts a string, json.Unmarshal decodes the same
// value from it; and Read accepts everything Append writes.
func FuzzRead(f *testing.F) {
	for _, s := range []string{`""`, `"plain"`, `"q\"uote"`, `"back\\slash"`, `"tab\t"`, `"\u003c\u00e9"`, `"\ud83d\ude00"`, `"é"`, "\"\xff\"", `"unterminated`, `"x\`, `"\u12"`, `"a"rest`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if s, rest, ok := Read(b); ok {
			var want string
			if err := json.Unmarshal(b[:len(b)-len(rest)], &want); err != nil || s != want {
				t.Fatalf("Read(%q) = %q, json.Unmarshal = %q, %v", b, s, want, err)
			}
		}
		s := string(b)
		enc := Append(nil, s)
		got, rest, ok := Read(append(enc, ','))
		var want string
		_ = json.Unmarshal(enc, &want)
		if !ok && utf8.ValidString(s) && !hasSurrogateEscape(enc) {
			t.Fatalf("Read(Append(%q)) not accepted: %s", s, enc)
		}
		if ok && (got != want || string(rest) != ",") {
			t.Fatalf("Read(Append(%q)) = %q, %q; want %q", s, got, rest, want)
		}
	})
}

// hasSurrogateEscape reports whether a JSON string holds a \uD800-\uDFFF
// escape, which Read leaves to encoding/json.
func hasSurrogateEscape(enc []byte) bool {
	for i := 0; i+2 < len(enc); i++ {
		if enc[i] == '\\' && enc[i+1] == 'u' && (enc[i+2] == 'd' || enc[i+2] == 'D') {
			return true
		}
	}
	return false
}
