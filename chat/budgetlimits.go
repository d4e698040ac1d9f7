package chat

import "github.com/forever-agents/forever/eventlog"

// An agent's budget limits are read before every model call
// (Store.BudgetLimits), and almost every agent has none: the read finds
// no row and answers the defaults. Store.unbudgeted, a flagCache of one
// flag an agent, remembers the agents found without a row, exactly as
// the interrupt flags found unset are remembered (interruptflags.go):
// the budget view bumps its generation after each commit that may set a
// row, so a set confirmed by a WaitFor of its sequence is seen by the
// next read, and a row that goes (a tombstone, a dropped view) only
// brings back the defaults, which is what a cached absence answers. An
// agent with limits is read from the view every time, as before.

// limitsMaySet is the Apply hook of the budget view for c: e may set an
// agent's limits row (a budget.set, a snapshot part, whose rows are set
// without a budget.set), so c learns of it once b is committed.
func limitsMaySet(c *flagCache, b *eventlog.Batch, e eventlog.Event) {
	if e.Type == EventBudgetSet || e.Type == eventlog.TypeSnapshot {
		b.AfterCommit(c.changed)
	}
}
