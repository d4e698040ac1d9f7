// Package jsonstr appends and reads JSON strings without reflection, for the
// encoders and decoders on hot paths (event envelopes, chat chunks, gateway
// frames).
package jsonstr

import "encoding/json"

// Append appends s to b as a JSON string. Plain ASCII is copied as is;
// anything that may need escaping (quotes, backslashes, control characters,
// non-ASCII, invalid UTF-8, HTML characters) goes through encoding/json, so
// the result is what json.Marshal would write.
func Append(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
