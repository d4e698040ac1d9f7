package verify_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/verify"
)

// TestCheckAfterDelete: a deleted agent's log is its tombstones, and Check
// finds it clean; the id used again is a new agent, checked from nothing
// (a turn with an old request id, a turn while the old life's last turn
// never ended); an acknowledged write of the deleted life is a note; and
// events a purge left before a tombstone are superseded, not checked.
func TestCheckAfterDelete(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := newLog(t, s, 1)
	h := history{t, lg}
	clean(h)
	if _, err := lg.Delete(t.Context(), "a1"); err != nil {
		t.Fatal(err)
	}
	rep := check(t, lg, verify.Options{Acked: []verify.Ack{{Agent: "a1", ID: "f1"}}})
	if len(rep.Violations) != 0 {
		t.Fatalf("violations after delete: %v", rep.Violations)
	}
	if len(rep.Notes) != 1 || rep.Notes[0].Kind != verify.KindAckDeleted {
		t.Fatalf("notes %v, want the ack of f1 noted as deleted", rep.Notes)
	}

	// The id again, from nothing: request id r1 again, while the old
	// life's turn r3 never ended.
	h.ev("a1", "fiber.started", m{"id": "f9", "name": "__chat_turn:r1"})
	h.ev("a1", "turn.started", m{"requestId": "r1", "streamId": "s9", "assistantMessageId": "m9"})
	h.typed("a1", "s9", 0, "start")
	h.typed("a1", "s9", 1, "finish")
	h.ev("a1", "message.appended", m{"id": "m2", "role": "assistant", "requestId": "r1"})
	h.ev("a1", "turn.completed", m{"requestId": "r1", "finishReason": "stop"})
	h.ev("a1", "fiber.completed", m{"id": "f9"})

	// steps:b deleted by a delete that crashed before its purge: its old
	// events are still stored before the tombstone.
	ev, err := eventlog.NewEvent("steps:b", eventlog.TypeDeleted, eventlog.Tombstone{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lg.Append(t.Context(), ev); err != nil {
		t.Fatal(err)
	}
	h.ev("steps:b", "fiber.started", m{"id": "f2", "name": "steps"})

	rep = check(t, lg, verify.Options{})
	if len(rep.Violations) != 0 {
		t.Fatalf("violations after the id's reuse: %v", rep.Violations)
	}
	i := slices.IndexFunc(rep.Notes, func(v verify.Violation) bool { return v.Kind == verify.KindSuperseded })
	if i < 0 || rep.Notes[i].Agent != "steps:b" || !strings.Contains(rep.Notes[i].Text, "tombstone") {
		t.Fatalf("notes %v, want steps:b's events before its tombstone superseded", rep.Notes)
	}
}

// TestCheckChildDeleted: a parent's links to the turns of a child deleted
// since are notes, not violations.
func TestCheckChildDeleted(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := newLog(t, s, 1)
	clean(history{t, lg})
	if _, err := lg.Delete(t.Context(), "k1"); err != nil {
		t.Fatal(err)
	}
	rep := check(t, lg, verify.Options{})
	if !rep.OK() || len(rep.Notes) != 2 || rep.Notes[0].Kind != verify.KindLinkChildDeleted || rep.Notes[0].Agent != "p1" {
		t.Fatalf("want two links to k1's deleted turns noted:\n%s", rep)
	}
}
