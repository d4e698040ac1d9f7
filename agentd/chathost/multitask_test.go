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
		{"unbuilt", `{"text":"hi","multitask":"debounce"}`, "", `"debounce" is not supported yet; use one of reject, interrupt, enqueue`},
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
			if strings.Contains(string(req.Body), "multitask") {
				t.Fatalf("request context keeps it: %s", req.Body)
			}
		})
	}
}
