package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/agents"
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

// TestChildrenColumn: agentd agents's CHILDREN column says how many
// children run and how many are ephemeral.
func TestChildrenColumn(t *testing.T) {
	for _, tt := range []struct {
		cs   []agents.Child
		want string
	}{
		{nil, "-"},
		{[]agents.Child{{Agent: "a", Mode: "persistent", Status: "completed"}}, "1"},
		{[]agents.Child{{Agent: "a", Mode: "persistent", Status: "running"}, {Agent: "b~p~1", Mode: "ephemeral", Status: "completed"}, {Agent: "b~p~2", Mode: "ephemeral", Status: "running"}}, "3, 2 running, 2 ephemeral"},
	} {
		if got := children(tt.cs); got != tt.want {
			t.Errorf("children(%+v) = %q, want %q", tt.cs, got, tt.want)
		}
	}
}
