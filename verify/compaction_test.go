package verify_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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
	lg := compactableLog(t)
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

// TestCheckAfterAPartlyUndonePurge: a crash can undo part of a
// compaction's purge (seen with nats-server 2.15.2 under SIGKILL), so an
// agent's log holds the tail of its old history, whose fibers' starts are
// gone, then its snapshot. The snapshot supersedes that tail: it is a
// note, not a violation, and what comes after the snapshot is checked
// against the snapshot alone.
func TestCheckAfterAPartlyUndonePurge(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	// The snapshot of a live fiber with a completed op, taken for real.
	src := newLog(t, s, 1)
	views, err := src.NewFollower()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fiber.AddTable(src, views); err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunFollower(t, views)
	old := []struct {
		typ string
		v   m
	}{
		{"fiber.started", m{"id": "f1", "name": "steps"}},
		{"op.started", m{"fiber": "f1", "opId": "o1"}},
		{"op.completed", m{"fiber": "f1", "opId": "o1", "result": 1}},
		{"fiber.stashed", m{"id": "f1", "snapshot": m{"done": 1}}},
	}
	for _, e := range old {
		history{t, src}.ev("steps:p", e.typ, e.v)
	}
	if _, err := src.Compact(t.Context(), "steps:p"); err != nil {
		t.Fatal(err)
	}
	snap, err := src.Read(t.Context(), eventlog.Filter{Agent: "steps:p"}, 0, 0)
	if err != nil || len(snap) != 1 || snap[0].Type != eventlog.TypeSnapshot {
		t.Fatalf("after compaction: %v %v", snap, err)
	}

	// The log as the crash left it: the tail of the history (its fiber's
	// start purged), the snapshot, and the fiber going on after it.
	lg := newLog(t, s, 2)
	h := history{t, lg}
	for _, e := range old[2:] {
		h.ev("steps:p", e.typ, e.v)
	}
	if _, err := lg.Append(t.Context(), eventlog.Event{Agent: "steps:p", Type: eventlog.TypeSnapshot, Data: snap[0].Data}); err != nil {
		t.Fatal(err)
	}
	h.ev("steps:p", "fiber.completed", m{"id": "f1"})
	rep := check(t, lg, verify.Options{})
	if len(rep.Violations) != 0 {
		t.Fatalf("violations: %v", rep.Violations)
	}
	if len(rep.Notes) != 1 || rep.Notes[0].Kind != verify.KindSuperseded || !strings.Contains(rep.Notes[0].Text, "2 events") {
		t.Fatalf("notes %v, want the 2 superseded events noted", rep.Notes)
	}

	// After the snapshot, the rules hold against it: o1 completed.
	h.ev("steps:p", "op.completed", m{"fiber": "f1", "opId": "o1", "result": 2})
	rep = check(t, lg, verify.Options{})
	if !rep.Has(verify.KindOpCompletedTwice) && !rep.Has(verify.KindAfterEnd) {
		t.Fatalf("an op completed again after the snapshot: %v", rep.Violations)
	}
}

// TestCheckReadsAgainAfterAPurgeMidRead: a live node compacts an agent
// while Check reads the events (the chaos runs' verify does, on nodes that
// compact their idle agents every second). The compaction appends its
// snapshot after the read's last sequence and purges the agent's events
// before the read reaches them, so that read holds neither: every
// acknowledged write of the agent would look lost. Check sees that the
// log's removals changed and reads it again, where the agent's snapshot
// holds its turn.
func TestCheckReadsAgainAfterAPurgeMidRead(t *testing.T) {
	lg := compactableLog(t)
	clean(history{t, lg})
	eventReads, again := 0, 0
	afterLast := func(f eventlog.Filter) {
		if f.Chunks {
			return
		}
		// The second read of the events (the first finds snapshots),
		// once: a1 compacted between its last sequence and its events.
		if eventReads++; eventReads == 2 {
			if _, err := lg.Compact(t.Context(), "a1"); err != nil {
				t.Errorf("compact a1: %v", err)
			}
		}
	}
	opts := verify.WithHooks(verify.Options{Acked: []verify.Ack{{Agent: "a1", ID: "r1"}}}, afterLast, func() { again++ })
	rep := check(t, lg, opts)
	if len(rep.Violations) != 0 {
		t.Fatalf("violations with a purge during the read: %v", rep.Violations)
	}
	if rep.Reads != 2 || again != 1 {
		t.Fatalf("read %d times, again %d times; want 2 and 1", rep.Reads, again)
	}
	if !strings.Contains(rep.String(), "read 2 times") {
		t.Errorf("the report does not say it read twice:\n%s", rep)
	}
}

// TestCheckFailsOnALogPurgedDuringEveryRead: when chunks are purged
// during each of its reads of the chunks, Check gives up with
// ErrUnsettled instead of a report of losses that were purges; the same
// purges during its read of the events change nothing it reads, and it
// reads once.
func TestCheckFailsOnALogPurgedDuringEveryRead(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := newLog(t, s, 1)
	clean(history{t, lg})
	n := 0
	churn := func(chunks bool) func(eventlog.Filter) {
		return func(f eventlog.Filter) {
			if f.Chunks != chunks {
				return
			}
			n++
			stream := fmt.Sprintf("churn%d", n)
			if _, err := lg.Append(t.Context(), eventlog.Event{Agent: "a9", Stream: stream, Type: "chunk", Data: []byte(`{}`)}); err != nil {
				t.Error(err)
			}
			if err := lg.PurgeChunks(t.Context(), "a9", stream); err != nil {
				t.Error(err)
			}
		}
	}
	rep, err := verify.Check(t.Context(), lg, verify.WithPause(verify.WithHooks(verify.Options{}, churn(true), nil), time.Millisecond))
	if !errors.Is(err, verify.ErrUnsettled) {
		t.Fatalf("check of chunks purged during every read: %v, want ErrUnsettled", err)
	}
	if rep.Reads != 10 {
		t.Errorf("read %d times, want 10", rep.Reads)
	}
	rep, err = verify.Check(t.Context(), lg, verify.WithHooks(verify.Options{}, churn(false), nil))
	if err != nil || rep.Reads != 1 {
		t.Fatalf("check of chunks purged while it read the events: %v after %d reads, want one clean read", err, rep.Reads)
	}
}

// compactableLog is a log on a server of its own with the views that
// Compact snapshots (the runs view and the chat views) following it.
func compactableLog(t *testing.T) *eventlog.Log {
	t.Helper()
	lg := newLog(t, eventlogtest.RunServer(t, eventlogtest.ServerOptions{}), 1)
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
	return lg
}
