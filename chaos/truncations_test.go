package main

import (
	"strings"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestTruncations reads an agent's stored truncations, each with the turn
// that followed it, from a real server's log.
func TestTruncations(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	ctx := t.Context()
	for _, e := range []eventlog.Event{
		{Type: chat.EventTurnStarted, Data: []byte(`{"requestId":"r1"}`)},
		{Type: chat.EventMessagesTruncated, Data: []byte(`{"afterId":"m1"}`)},
		{Type: "message.stored", Data: []byte(`{}`)},
		{Type: chat.EventTurnStarted, Data: []byte(`{"requestId":"r2"}`)},
		{Type: chat.EventMessagesTruncated, Data: []byte(`{"afterId":""}`)},
	} {
		e.Agent = "a1"
		if _, err := lg.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	l := &load{}
	got := l.truncations(ctx, &client{lg: lg}, "a1")
	for _, want := range []string{`seq 2 by  after message "m1" before turn r2`, `seq 5 by  after message ""`} {
		if !strings.Contains(got, want) {
			t.Errorf("truncations = %q, want it to name %q", got, want)
		}
	}
	if got := l.truncations(ctx, &client{lg: lg}, "a2"); got != "no truncation stored" {
		t.Errorf("an agent without one: %q", got)
	}
}
