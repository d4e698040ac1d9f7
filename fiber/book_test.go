package fiber

import (
	"testing"
)

func TestNextAttempt(t *testing.T) {
	for _, tc := range []struct {
		name      string
		last, max int
		attempt   int
		abandon   bool
	}{
		{"first", 0, 5, 1, false},
		{"middle", 3, 5, 4, false},
		{"last allowed", 4, 5, 5, false},
		{"used up", 5, 5, 5, true},
		{"over", 7, 5, 7, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, ab := nextAttempt(tc.last, tc.max)
			if a != tc.attempt || ab != tc.abandon {
				t.Fatalf("nextAttempt(%d, %d) = %d, %v; want %d, %v", tc.last, tc.max, a, ab, tc.attempt, tc.abandon)
			}
		})
	}
}

func TestDecideStep(t *testing.T) {
	started := &Op{ID: "x"}
	done := &Op{ID: "x", Completed: true}
	for _, tc := range []struct {
		name   string
		op     *Op
		unsafe bool
		want   stepAction
	}{
		{"new", nil, false, stepRun},
		{"new unsafe", nil, true, stepRun},
		{"completed", done, false, stepCached},
		{"completed unsafe", done, true, stepCached},
		{"started", started, false, stepRerun},
		{"started unsafe", started, true, stepAmbiguous},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideStep(tc.op, tc.unsafe); got != tc.want {
				t.Fatalf("decideStep = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestOpID(t *testing.T) {
	a := opID("f1", "charge", 1)
	if got := opID("f1", "charge", 1); got != a {
		t.Fatal("op id not stable")
	}
	for _, other := range []string{opID("f2", "charge", 1), opID("f1", "charge", 2), opID("f1", "charge2", 1)} {
		if other == a {
			t.Fatal("op ids collide")
		}
	}
	if len(a) != 32 {
		t.Fatalf("op id %q: want 32 hex chars", a)
	}
}

func TestBook(t *testing.T) {
	b := newBook()
	f := &Fiber{id: "f1"}
	s, err := b.start("f1", f)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.start("f1", f); err != ErrRunning {
		t.Fatalf("second start = %v, want ErrRunning", err)
	}
	if _, ok := b.claim("f1"); ok {
		t.Fatal("claimed a running fiber")
	}
	b.release("f1", s)

	// Recovery claims, the hook resumes, the resumed run ends.
	rs, ok := b.claim("f1")
	if !ok {
		t.Fatal("claim of orphan refused")
	}
	if _, ok := b.claim("f1"); ok {
		t.Fatal("orphan claimed twice")
	}
	run, err := b.start("f1", f)
	if err != nil || run != rs {
		t.Fatalf("resume from recovery = %v, %v", run, err)
	}
	b.release("f1", run)
	if !b.settle("f1", rs) {
		t.Fatal("settle: want resumed")
	}

	// A failed resume goes back to recovering.
	rs, _ = b.claim("f1")
	run, _ = b.start("f1", f)
	b.abort("f1", run)
	if b.resumedBy(rs) {
		t.Fatal("aborted resume still counts")
	}
	if b.settle("f1", rs) {
		t.Fatal("settle: want not resumed")
	}
	if len(b.slots) != 0 {
		t.Fatalf("slots left: %v", b.slots)
	}

	b.close()
	if _, err := b.start("f2", f); err != ErrStopped {
		t.Fatalf("start after close = %v", err)
	}
	if _, ok := b.claim("f2"); ok {
		t.Fatal("claim after close")
	}
}
