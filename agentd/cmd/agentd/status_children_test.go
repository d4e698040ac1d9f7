package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/forever-agents/forever/agentd/host"
)

// TestPrintStatusChildren: status prints a chat agent's sub-agent calls in
// flight on lines of their own, not in the detail JSON.
func TestPrintStatusChildren(t *testing.T) {
	var detail any
	json.Unmarshal([]byte(`{"agent":"boss","pendingApprovals":[],"children":[{"agent":"kid-a","mode":"persistent","callId":"c1","requestId":"r","streamId":"s1","status":"running"}]}`), &detail)
	var out strings.Builder
	if err := printStatus(&out, host.Status{Agent: "boss", Type: "chat", Detail: detail}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if !strings.Contains(got, "kid-a (persistent, call c1) running, stream s1") || strings.Contains(got, `"children"`) {
		t.Fatalf("status:\n%s", got)
	}
}
