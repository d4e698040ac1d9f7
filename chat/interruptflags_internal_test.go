package chat

import (
	"testing"

	"github.com/forever-agents/forever/eventlog"
)

// TestFlagCacheLearnsOfEverySet: the interrupts view tells its flag cache
// of each event that may set a flag once applied, an interrupt.set and a
// snapshot part (a compaction's rows set flags without an interrupt.set),
// and of nothing else.
func TestFlagCacheLearnsOfEverySet(t *testing.T) {
	for _, c := range []struct {
		typ  string
		bump bool
	}{
		{EventInterruptSet, true}, {eventlog.TypeSnapshot, true},
		{EventInterruptCleared, false}, {EventMessageAppended, false},
	} {
		flags := newFlagCache()
		ev, err := eventlog.NewEvent("a1", c.typ, interruptFlag{Name: "pause"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := eventlog.ApplyInMemory(interruptsProjection(flags), []eventlog.Event{ev}); err != nil {
			t.Fatal(err)
		}
		if got := flags.gen.Load() > 0; got != c.bump {
			t.Errorf("%s: the cache learnt of a possible set: %v, want %v", c.typ, got, c.bump)
		}
	}
}
