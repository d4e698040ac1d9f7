package chat

import "testing"

// heldRun is a run holding the slot of turn r1 of a slotAgent.
func heldRun(t *testing.T) (*Agent, *[]string, *activeTurn, *turnRun) {
	t.Helper()
	a, misuse := slotAgent(t)
	at := newActiveTurn("r1")
	take(a, at)
	run := &turnRun{a: a}
	run.hold(at)
	return a, misuse, at, run
}

// The run owns its slot: hold makes it the run's, release gives it back
// once (a second release is reported and frees nothing), keep keeps it.
func TestRunReleasesItsSlotOnce(t *testing.T) {
	a, misuse, at, run := heldRun(t)
	if at.run != run {
		t.Fatalf("the slot does not point at the run that holds it")
	}
	run.release()
	if holder(a) != nil {
		t.Errorf("a released run still holds the slot")
	}
	next := newActiveTurn("r2")
	take(a, next)
	run.release()
	wantMisuse(t, misuse, "r1: released twice")
	if holder(a) != next {
		t.Errorf("a second release of r1's run freed the slot of r2")
	}
}

func TestRunKeepsItsSlot(t *testing.T) {
	a, misuse, at, run := heldRun(t)
	run.keep("its turn.started's fate is unknown")
	run.release()
	a.checkSlot(at, "turn fiber")
	wantMisuse(t, misuse)
	if holder(a) != at {
		t.Errorf("a kept slot was freed by its run's release")
	}
}

// A run without a slot (a turn ended outside a run) releases nothing.
func TestRunWithoutSlotReleasesNothing(t *testing.T) {
	a, misuse := slotAgent(t)
	at := newActiveTurn("r1")
	take(a, at)
	(&turnRun{a: a}).release()
	wantMisuse(t, misuse)
	if holder(a) != at {
		t.Errorf("a run without a slot freed another's")
	}
}
