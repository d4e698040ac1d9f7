package host_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/keepalive"
)

// TestUnknownCommandIs404: an unknown verb, and a subject that is not
// forever.cmd.<agent>.<verb>, are answered 404 with the error shape, never
// left to "no responders"; a known verb gets its own answer only.
func TestUnknownCommandIs404(t *testing.T) {
	_, _, nc, _ := startHost(t, agentdtest.Config(t), host.Config{}, make(chan keepalive.Schedule, 1))
	for _, tt := range []struct{ subject, code, text string }{
		{"forever.cmd.a1.nope", "404", `no verb "nope"`},
		{"forever.cmd.a.b.status", "404", "is not forever.cmd.<agent>.<verb>"},
		{"forever.cmd.a1", "404", "is not forever.cmd.<agent>.<verb>"},
	} {
		msg, err := nc.Request(tt.subject, nil, 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", tt.subject, err)
		}
		code := msg.Header.Get("Nats-Service-Error-Code")
		var body struct {
			Code  int
			Error string
		}
		if err := json.Unmarshal(msg.Data, &body); err != nil || code != tt.code || body.Code != 404 || !strings.Contains(body.Error, tt.text) {
			t.Errorf("%s: %s %s, want %s with %q", tt.subject, code, msg.Data, tt.code, tt.text)
		}
		// An unlisted verb (an internal one) is never offered to a client.
		if strings.Contains(body.Error, "the verbs are") && (strings.Contains(body.Error, "snooze") || !strings.Contains(body.Error, "start")) {
			t.Errorf("%s: %s lists an unlisted verb, or not the listed ones", tt.subject, body.Error)
		}
	}
	// Each of many: the catch-all must never take a known verb's command.
	for range 20 {
		if data, code := request(t, nc, "steps:x", "status", nil); code != "" {
			t.Fatalf("status: %s %s", code, data)
		}
	}
}
