package main

import (
	"testing"
	"time"
)

// TestSettled: the others' measure of a kill ends stallSettle after its
// victim is ready again, or at the first kill or SIGSTOP after the kill
// before that; disruptions before the kill, or after the settle, do not
// move it.
func TestSettled(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	k := stallKill{killed: t0, ready: t0.Add(6 * time.Second)}
	w := &stallWatch{disrupted: []time.Time{t0.Add(-time.Second), t0, t0.Add(20 * time.Second)}}
	if got, want := w.settled(k), k.ready.Add(stallSettle); !got.Equal(want) {
		t.Errorf("no disruption in the window: end %s, want %s", got.Sub(t0), want.Sub(t0))
	}
	w.disrupted = append(w.disrupted, t0.Add(8*time.Second), t0.Add(7*time.Second))
	if got, want := w.settled(k), t0.Add(7*time.Second); !got.Equal(want) {
		t.Errorf("a SIGSTOP 1 s after ready: end %s, want %s", got.Sub(t0), want.Sub(t0))
	}
}
