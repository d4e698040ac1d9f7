package mcptools

import (
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

func TestStderrLogger(t *testing.T) {
	var logs logBuffer
	w := &stderrLogger{logger: slog.New(slog.NewJSONHandler(&logs, nil))}
	long := strings.Repeat("x", maxStderrLine+10)
	for _, p := range []string{"a\nb", "c\r\n", "\n", long + "\n"} {
		if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", p, n, err)
		}
	}
	var got []string
	for line := range strings.Lines(logs.String()) {
		var rec struct{ Line string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		got = append(got, rec.Line)
	}
	want := []string{"a", "bc", long[:maxStderrLine], long[maxStderrLine:]}
	if !slices.Equal(got, want) {
		lens := func(ls []string) (n []int) {
			for _, l := range ls {
				n = append(n, len(l))
			}
			return n
		}
		t.Errorf("logged lines of lengths %v, want %v (%q...)", lens(got), lens(want), got[:min(2, len(got))])
	}
}
