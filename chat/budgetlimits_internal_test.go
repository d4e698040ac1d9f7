package chat

import (
	"testing"

	"github.com/forever-agents/forever/eventlog"
)

// TestBudgetCacheLearnsOfEverySet: the budget view tells Store.unbudgeted
// of each event that may set an agent's limits once applied, a
// budget.set and a snapshot part (a compaction's rows set limits without
// a budget.set), and of nothing else.
func TestBudgetCacheLearnsOfEverySet(t *testing.T) {
	tokens := int64(10)
	for _, c := range []struct {
		typ  string
		bump bool
	}{
		{EventBudgetSet, true}, {eventlog.TypeSnapshot, true},
		{EventUsageRecorded, false}, {EventTurnCompleted, false}, {EventInterruptSet, false},
	} {
		unbudgeted := newFlagCache()
		ev, err := eventlog.NewEvent("a1", c.typ, BudgetUpdate{Tokens: &tokens})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := eventlog.ApplyInMemory(budgetProjection(unbudgeted), []eventlog.Event{ev}); err != nil {
			t.Fatal(err)
		}
		if got := unbudgeted.gen.Load() > 0; got != c.bump {
			t.Errorf("%s: the cache learnt of a possible set: %v, want %v", c.typ, got, c.bump)
		}
	}
}
