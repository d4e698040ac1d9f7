package agentd

import (
	"testing"
	"time"
)

// TestAttemptBudget: retryQuorum's first attempts are short (they notice
// a meta leader elected meanwhile sooner), and later ones grow, so an
// attempt that needs more than 3 s on a loaded machine gets the time.
func TestAttemptBudget(t *testing.T) {
	want := []time.Duration{3 * time.Second, 3 * time.Second, 3 * time.Second, 6 * time.Second, 12 * time.Second, 12 * time.Second, 12 * time.Second}
	for n, w := range want {
		if got := attemptBudget(n); got != w {
			t.Errorf("attemptBudget(%d) = %s, want %s", n, got, w)
		}
	}
	if got := attemptBudget(1000); got != maxQuorumAttempt {
		t.Errorf("attemptBudget(1000) = %s, want %s", got, maxQuorumAttempt)
	}
}
