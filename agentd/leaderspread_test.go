package agentd

import (
	"testing"
	"time"
)

// TestSpreadGate: the leader spread is due every leaderSpreadEvery on the
// owner of partition 0; a due spread waits while the partitions move, and
// runs once they settle, or after spreadWaitMax whatever they do. The
// times are the gate's inputs, not measured.
func TestSpreadGate(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC)
	settled, unsettled := func() bool { return true }, func() bool { return false }
	asked := func() bool { t.Fatal("settled asked before the spread is due"); return false }

	g := spreadGate{due: t0.Add(leaderSpreadEvery)}
	if got := g.next(t0.Add(leaderSpreadEvery-time.Second), true, asked); got != spreadWait {
		t.Fatalf("before due: %v, want spreadWait", got)
	}
	due := t0.Add(leaderSpreadEvery)
	if got := g.next(due, true, unsettled); got != spreadHeld {
		t.Fatalf("due while partitions move: %v, want spreadHeld", got)
	}
	if got := g.next(due.Add(spreadWaitMax/2), true, unsettled); got != spreadWait {
		t.Fatalf("still moving, held %s: %v, want spreadWait", spreadWaitMax/2, got)
	}
	settledAt := due.Add(spreadWaitMax / 2).Add(spreadPoll)
	if got := g.next(settledAt, true, settled); got != spreadNow {
		t.Fatalf("settled: %v, want spreadNow", got)
	}
	if got := g.next(settledAt.Add(time.Second), true, asked); got != spreadWait {
		t.Fatalf("right after a spread: %v, want spreadWait", got)
	}

	// Partitions that never settle hold the spread for spreadWaitMax only.
	due = settledAt.Add(leaderSpreadEvery)
	if got := g.next(due, true, unsettled); got != spreadHeld {
		t.Fatalf("second due: %v, want spreadHeld", got)
	}
	if got := g.next(due.Add(spreadWaitMax), true, unsettled); got != spreadUnsettled {
		t.Fatalf("held %s: %v, want spreadUnsettled", spreadWaitMax, got)
	}

	// A node that does not own partition 0 never spreads, and a held
	// spread it lost the partition for is dropped.
	due = due.Add(spreadWaitMax).Add(leaderSpreadEvery)
	if got := g.next(due, true, unsettled); got != spreadHeld {
		t.Fatalf("third due: %v, want spreadHeld", got)
	}
	if got := g.next(due.Add(spreadPoll), false, asked); got != spreadWait || !g.held.IsZero() {
		t.Fatalf("partition 0 lost: %v held since %v, want spreadWait and nothing held", got, g.held)
	}
}
