package chathost

import (
	"errors"
	"strings"
	"testing"

	"github.com/forever-agents/forever/agentd/host"
)

// TestParseRequestMultitask: the chat payload's "multitask" is checked
// where the command enters, and is not kept in the turn's request context.
func TestParseRequestMultitask(t *testing.T) {
	for _, tc := range []struct {
		name, data, want, err string
	}{
		{"none", `{"text":"hi"}`, "", ""},
		{"enqueue", `{"text":"hi","multitask":"enqueue"}`, "enqueue", ""},
		{"ai sdk body", `{"id":"a","multitask":"interrupt","messages":[{"id":"m","role":"user","parts":[{"type":"text","text":"hi"}]}]}`, "interrupt", ""},
		{"debounce", `{"text":"hi","multitask":"debounce","debounceMs":250}`, "debounce", ""},
		{"merge", `{"text":"hi","multitask":"merge"}`, "merge", ""},
		{"debounce too long", `{"text":"hi","multitask":"debounce","debounceMs":600000}`, "", `debounceMs 600000 is outside 0 to 60000`},
		{"unknown", `{"text":"hi","multitask":"queue"}`, "", `"queue" is not a multitask policy`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := ParseRequest([]byte(tc.data))
			if tc.err != "" {
				if !errors.Is(err, host.ErrBadRequest) || !strings.Contains(host.ClientError(err).Message, tc.err) {
					t.Fatalf("err %v, want 400 with %q", err, tc.err)
				}
				return
			}
			if err != nil || req.Multitask != tc.want {
				t.Fatalf("multitask %q, %v; want %q", req.Multitask, err, tc.want)
			}
			if strings.Contains(string(req.Body), "multitask") || strings.Contains(string(req.Body), "debounce") {
				t.Fatalf("request context keeps it: %s", req.Body)
			}
		})
	}
}
