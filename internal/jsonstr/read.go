package jsonstr

import (
	"unicode/utf16"
	"unicode/utf8"
)

// Cut returns b without prefix and true, or b and false when b does not
// start with prefix.
func Cut(b []byte, prefix string) ([]byte, bool) {
	if len(b) < len(prefix) || string(b[:len(prefix)]) != prefix {
		return b, false
	}
	return b[len(prefix):], true
}

// Read reads the JSON string at the start of b and returns its value and
// the rest of b. It decodes the escapes encoding/json writes (\" \\ \/ \b
// \f \n \r \t, and \uXXXX outside the surrogate range); for anything else
// (a surrogate escape, invalid UTF-8, a raw control character, a string
// that does not end) ok is false and the caller falls back to
// encoding/json. Whenever ok is true, the value is what json.Unmarshal
// decodes.
func Read(b []byte) (s string, rest []byte, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return "", b, false
	}
	var buf []byte // the decoded value, once an escape is seen
	start := 1     // of the run not yet copied to buf
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			run := b[start:i]
			if !utf8.Valid(run) {
				return "", b, false
			}
			if buf == nil {
				return string(run), b[i+1:], true
			}
			return string(append(buf, run...)), b[i+1:], true
		case c < 0x20:
			return "", b, false
		case c == '\\':
			if i+1 >= len(b) {
				return "", b, false
			}
			run := b[start:i]
			if !utf8.Valid(run) {
				return "", b, false
			}
			buf = append(buf, run...)
			r, n := unescape(b[i+1:])
			if n == 0 {
				return "", b, false
			}
			buf = utf8.AppendRune(buf, r)
			i += n // the loop's i++ steps past the escape's last byte
			start = i + 1
		}
	}
	return "", b, false
}

// unescape decodes the escape after a backslash; n is how many bytes it
// took, 0 when it is not one Read accepts.
func unescape(b []byte) (r rune, n int) {
	switch b[0] {
	case '"', '\\', '/':
		return rune(b[0]), 1
	case 'b':
		return '\b', 1
	case 'f':
		return '\f', 1
	case 'n':
		return '\n', 1
	case 'r':
		return '\r', 1
	case 't':
		return '\t', 1
	case 'u':
		if len(b) < 5 {
			return 0, 0
		}
		for _, c := range b[1:5] {
			var d rune
			switch {
			case '0' <= c && c <= '9':
				d = rune(c - '0')
			case 'a' <= c && c <= 'f':
				d = rune(c-'a') + 10
			case 'A' <= c && c <= 'F':
				d = rune(c-'A') + 10
			default:
				return 0, 0
			}
			r = r<<4 | d
		}
		if utf16.IsSurrogate(r) {
			return 0, 0
		}
		return r, 5
	}
	return 0, 0
}
