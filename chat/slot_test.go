package chat

import (
	"io"
	"log/slog"
	"slices"
	"testing"
)

// slotAgent is an Agent with only what its turn slot needs, recording
// each misuse of a slot.
func slotAgent(t *testing.T) (*Agent, *[]string) {
	t.Helper()
	var misuse []string
	a := &Agent{logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	a.onSlotMisuse = func(requestID, what string) { misuse = append(misuse, requestID+": "+what) }
	return a, &misuse
}

// take gives at the agent's slot, as start and claim do.
func take(a *Agent, at *activeTurn) {
	a.mu.Lock()
	a.mu.active = at
	a.mu.Unlock()
}

// holder is the turn that holds the agent's slot, nil if none.
func holder(a *Agent) *activeTurn {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mu.active
}

func wantMisuse(t *testing.T, misuse *[]string, want ...string) {
	t.Helper()
	if !slices.Equal(*misuse, want) {
		t.Errorf("misuse = %q, want %q", *misuse, want)
	}
}

func TestSlotReleasedTwiceIsCaught(t *testing.T) {
	a, misuse := slotAgent(t)
	first := newActiveTurn("r1")
	take(a, first)
	a.release(first)
	// The next turn takes the slot; a second release of the first must
	// not free it.
	next := newActiveTurn("r2")
	take(a, next)
	a.release(first)
	wantMisuse(t, misuse, "r1: released twice")
	if holder(a) != next {
		t.Errorf("a second release of r1 freed the slot of r2")
	}
}

func TestSlotNotReleasedIsCaught(t *testing.T) {
	a, misuse := slotAgent(t)
	at := newActiveTurn("r1")
	take(a, at)
	a.checkSlot(at, "turn fiber")
	wantMisuse(t, misuse, "r1: not released by turn fiber")
	if holder(a) != nil {
		t.Errorf("a slot its owner did not release is still taken")
	}
	select {
	case <-at.done:
	default:
		t.Errorf("the turn's done was not closed")
	}
}

func TestSlotReleasedOrKeptPasses(t *testing.T) {
	a, misuse := slotAgent(t)
	released := newActiveTurn("r1")
	take(a, released)
	a.release(released)
	a.checkSlot(released, "turn fiber")

	kept := newActiveTurn("r2")
	take(a, kept)
	a.keepSlot(kept, "its turn.started's fate is unknown")
	a.checkSlot(kept, "turn fiber")
	wantMisuse(t, misuse)
	if holder(a) != kept {
		t.Errorf("a kept slot was freed")
	}
	// A kept slot is still released once when its owner does.
	a.release(kept)
	a.release(kept)
	wantMisuse(t, misuse, "r2: released twice")
}
