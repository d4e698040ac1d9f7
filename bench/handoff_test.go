package main

import (
	"testing"
	"time"

	"github.com/forever-agents/forever/internal/stalls"
)

// TestMeasureHandoff: a gap between events of two writers is a move, one
// between events of the same writer is steady, and gaps outside the
// phase are left out.
func TestMeasureHandoff(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	stamps := map[string][]stalls.Stamp{
		"a": {{At: ms(900), Node: "n1"}, {At: ms(100), Node: "n1"}, {At: ms(350), Node: "n1"}, {At: ms(1300), Node: "n2"}},
		"b": {{At: ms(-500), Node: "n2"}, {At: ms(-200), Node: "n2"}, {At: ms(200), Node: "n2"}, {At: ms(5000), Node: "n2"}},
	}
	ph := measureHandoff(stamps, ms(0), ms(2000))
	if len(ph.moves) != 1 || ph.moves[0] != 400*time.Millisecond {
		t.Errorf("moves %v; want one of 400ms (a: n1 at 900 to n2 at 1300)", ph.moves)
	}
	// a: 100->350, 350->900; b: -200->200 ends after at. b's 200->5000
	// starts before end and counts; -500->-200 ends before at.
	if len(ph.steady) != 4 {
		t.Errorf("steady %v; want 4 gaps", ph.steady)
	}
	if ph.worst != 4800*time.Millisecond {
		t.Errorf("worst %v; want 4.8s (b's last gap)", ph.worst)
	}
}
