package verify_test

import (
	"strings"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/verify"
)

// TestCheckAfterCompaction: a compacted agent's snapshot stands for its
// purged history. The clean history compacted checks clean; events after
// the snapshot are checked against what it holds (a live fiber's
// completed op, its recovery attempt, a turn that ended).
func TestCheckAfterCompaction(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := newLog(t, s, 1)
	views, err := lg.NewFollower()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fiber.AddTable(lg, views); err != nil {
		t.Fatal(err)
	}
	for _, p := range []eventlog.Projection{chat.MessagesProjection(), chat.StateProjection(), chat.UsageProjection(),
		chat.InterruptsProjection(), chat.TurnsProjection()} {
		if err := views.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	eventlogtest.RunFollower(t, views)
	h := history{t, lg}
	clean(h)
	// A live fiber with a completed op and one recovery on steps:c.
	h.ev("steps:c", "fiber.started", m{"id": "f5", "name": "steps"})
	h.ev("steps:c", "op.started", m{"fiber": "f5", "opId": "o5"})
	h.ev("steps:c", "op.completed", m{"fiber": "f5", "opId": "o5", "result": 5})
	h.ev("steps:c", "fiber.recovered", m{"id": "f5", "attempt": 1})
	for _, a := range []string{"a1", "steps:b", "steps:c"} {
		if _, err := lg.Compact(t.Context(), a); err != nil {
			t.Fatalf("compact %s: %v", a, err)
		}
	}
	if evs, _ := lg.Read(t.Context(), eventlog.Filter{Agent: "a1"}, 0, 0); len(evs) != 1 {
		t.Fatalf("a1 holds %d events after compaction", len(evs))
	}
	rep := check(t, lg, verify.Options{Acked: []verify.Ack{{Agent: "a1", ID: "r1"}, {Agent: "steps:c", ID: "f5"}, {Agent: "steps:b", ID: "f2"}}})
	if len(rep.Violations) != 0 {
		t.Fatalf("violations after compaction: %v", rep.Violations)
	}
	// f2 ended before the snapshot: its ack is a note, not a loss.
	if len(rep.Notes) != 1 || rep.Notes[0].Kind != verify.KindAckCompacted {
		t.Fatalf("notes %v, want the ack of f2 noted as compacted", rep.Notes)
	}

	// Breaking the rules after the snapshot is seen.
	h.ev("steps:c", "op.completed", m{"fiber": "f5", "opId": "o5", "result": 6})
	h.ev("steps:c", "fiber.recovered", m{"id": "f5", "attempt": 1})
	h.ev("a1", "turn.completed", m{"requestId": "r1", "finishReason": "stop"})
	h.ev("a1", "op.started", m{"fiber": "f1", "opId": "o9"})
	rep = check(t, lg, verify.Options{})
	want := []verify.Kind{verify.KindOpCompletedTwice, verify.KindRecoveryAttempt, verify.KindTurnOutcomeTwice, verify.KindFiberUnknown}
	var got []string
	for _, v := range rep.Violations {
		got = append(got, string(v.Kind))
	}
	for _, k := range want {
		if !strings.Contains(strings.Join(got, " "), string(k)) {
			t.Errorf("violations %v, want %s", got, k)
		}
	}
}
