package eventlog

import (
	"testing"
	"time"
)

// TestReplicatedGroupsAreAtomic: a replicated stream never gets a
// pipelined chain (whose message-id expectations its replicas check again
// on apply), whatever the measured costs; an R1 stream follows them.
func TestReplicatedGroupsAreAtomic(t *testing.T) {
	for _, replicated := range []bool{false, true} {
		c := &sendCost{replicated: replicated}
		// Pipelined messages measured far cheaper than a batch.
		c.observe(false, 10, 10*time.Microsecond)
		c.observe(true, 10, 10*time.Millisecond)
		if got := c.atomic(3); got != replicated {
			t.Errorf("replicated=%v: a group of 3 atomic = %v, want %v", replicated, got, replicated)
		}
		if c.atomic(1) {
			t.Errorf("replicated=%v: a single message sent as a batch", replicated)
		}
	}
}
