package chat_test

import (
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/eventlog"
)

// TestInterruptSeenByNextCheck: the interrupt flag is read from memory
// once found unset, and still every set stored before a check (its
// sequence applied by the views) is seen by it: one this agent set, one
// another process appended to the log, one set again after a clear, and
// one kept through a compaction.
func TestInterruptSeenByNextCheck(t *testing.T) {
	e := newEnv(t)
	h := e.host(t, "a1", &fake{scripts: []script{passLocal()}}, nil)
	check := func(want bool, what string) {
		t.Helper()
		for range 3 { // the second and third read the cached answer
			if got := h.a.Interrupted("pause"); got != want {
				t.Fatalf("%s: Interrupted = %v, want %v", what, got, want)
			}
		}
	}
	setElsewhere := func(typ string) {
		t.Helper()
		ev, err := eventlog.NewEvent("a1", typ, map[string]string{"name": "pause"})
		if err != nil {
			t.Fatal(err)
		}
		seq, err := e.lg.Append(t.Context(), ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.store.WaitFor(t.Context(), seq); err != nil {
			t.Fatal(err)
		}
	}
	check(false, "never set")
	setElsewhere(chat.EventInterruptSet)
	check(true, "set by another process")
	if err := h.a.ClearInterrupt(t.Context(), "pause"); err != nil {
		t.Fatal(err)
	}
	check(false, "cleared")
	if err := h.a.SetInterrupt(t.Context(), "pause"); err != nil {
		t.Fatal(err)
	}
	check(true, "set again by the agent")
	if _, err := e.lg.Compact(t.Context(), "a1"); err != nil {
		t.Fatal(err)
	}
	check(true, "after a compaction")
	setElsewhere(chat.EventInterruptCleared)
	check(false, "cleared by another process")
	setElsewhere(chat.EventInterruptSet)
	check(true, "set by another process after a clear")
}
