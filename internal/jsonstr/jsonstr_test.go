package jsonstr

import (
	"encoding/json"
	"testing"
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
