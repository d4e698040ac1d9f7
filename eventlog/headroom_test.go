package eventlog

import (
	"testing"
	"time"
)

// TestHeadroom: a check that found room lets half of it through without
// reading again, for headroomTTL; none when at most one consumer was
// free; every stream apart; forgotten when a follow finds no room.
func TestHeadroom(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		name   string
		free   int
		at     time.Duration // after the check
		passes int           // takes that pass at at
	}{
		{"half of 10", 10, 0, 5},
		{"one free", 1, 0, 0},
		{"none free", 0, 0, 0},
		{"no limit", -1, 0, 100},
		{"past the TTL", 10, headroomTTL, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var h headroom
			h.set("S", c.free, t0)
			got := 0
			for range 100 {
				if h.take("S", t0.Add(c.at)) {
					got++
				}
			}
			if got != c.passes {
				t.Errorf("passes = %d, want %d", got, c.passes)
			}
			if h.take("OTHER", t0) {
				t.Error("another stream passed on S's headroom")
			}
		})
	}
	var h headroom
	h.set("S", 10, t0)
	h.forget("S")
	if h.take("S", t0) {
		t.Error("a forgotten headroom passed")
	}
	if got, want := minFree(freeOf(256, 250), freeOf(0, 7)), 6; got != want {
		t.Errorf("minFree(account 250 of 256, stream unlimited) = %d, want %d", got, want)
	}
}
