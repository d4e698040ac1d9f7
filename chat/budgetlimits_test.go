package chat_test

import (
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/eventlog"
)

// TestBudgetLimitsSeenByNextRead: an agent found without budget limits is
// answered from memory, and still every budget.set stored before a read
// (its sequence applied by the views) is seen by it: on an agent read
// without limits, after its tombstone brought the defaults back, and
// through a compaction.
func TestBudgetLimitsSeenByNextRead(t *testing.T) {
	e := newEnv(t)
	check := func(agent string, want int64, what string) {
		t.Helper()
		for range 3 { // the second and third may read the cached answer
			l, err := e.store.BudgetLimits(agent)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if l.Tokens != want || l.Period == "" {
				t.Fatalf("%s: limits %+v, want tokens %d", what, l, want)
			}
		}
	}
	wait := func(seq eventlog.Seq) {
		t.Helper()
		if err := e.store.WaitFor(t.Context(), seq); err != nil {
			t.Fatal(err)
		}
	}
	set := func(agent string, tokens int64) {
		t.Helper()
		ev, err := eventlog.NewEvent(agent, chat.EventBudgetSet, chat.BudgetUpdate{Tokens: &tokens})
		if err != nil {
			t.Fatal(err)
		}
		seq, err := e.lg.Append(t.Context(), ev)
		if err != nil {
			t.Fatal(err)
		}
		wait(seq)
	}
	check("a1", 0, "never set")
	check("a2", 0, "another agent never set")
	set("a1", 1000)
	check("a1", 1000, "set after a read found none")
	check("a2", 0, "another agent still without limits")
	del, err := e.lg.Delete(t.Context(), "a1")
	if err != nil {
		t.Fatal(err)
	}
	wait(del.Seq)
	check("a1", 0, "after the agent's tombstone")
	set("a1", 2000)
	check("a1", 2000, "set again after the tombstone")
	if _, err := e.lg.Compact(t.Context(), "a1"); err != nil {
		t.Fatal(err)
	}
	set("a2", 3000)
	check("a1", 2000, "after a compaction")
	check("a2", 3000, "the other agent, set last")
}
