package main

import (
	"context"
	"testing"
	"time"

	"github.com/forever-agents/forever/internal/stalls"
)

// TestStampLog: reads that overlap record each event once; since copies
// the events from a time on; a snapshot covering events no read saw
// marks the time since the last one read unread, and one covering only
// events read marks nothing; a measure waits until every stream's reads
// began past its end, or says which was not read.
func TestStampLog(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	st := func(s float64, seq, covers uint64) stalls.Stamp {
		return stalls.Stamp{At: at(s), Node: "n1", Seq: seq, Covers: covers}
	}
	s := newStampLog([]string{"EV_0", "EV_1"})
	s.add("EV_0", map[string][]stalls.Stamp{"a": {st(1, 10, 0), st(2, 11, 0)}}, at(3))
	// The next read overlaps the first: a's 11 again, and 12, stored late.
	// b's snapshot covers its 20, read before: nothing unread.
	s.add("EV_0", map[string][]stalls.Stamp{"a": {st(2, 11, 0), st(2.5, 12, 0), st(4, 13, 0)}}, at(5))
	s.add("EV_1", map[string][]stalls.Stamp{"b": {st(4.5, 20, 0), st(5, 21, 20)}}, at(5))
	got := s.since(at(2))
	if len(got["a"]) != 3 || len(got["b"]) != 2 {
		t.Fatalf("since 2 s: %v, want a at 2, 2.5 and 4 s, and b at 4.5 and 5 s", got)
	}
	got["a"][0].Node = "changed"
	if s.since(at(2))["a"][0].Node != "n1" {
		t.Fatal("since returned the log's own slice, not a copy")
	}
	if s.unreadIn("b", at(0), at(10)) {
		t.Error("b's snapshot covers only events read: marked unread")
	}
	// a's events 14-16 (4-7 s) were purged by a snapshot at 7 s before a
	// read saw them: 4-7 s is unread.
	s.add("EV_0", map[string][]stalls.Stamp{"a": {st(7, 17, 16), st(7.5, 18, 0)}}, at(8))
	for _, c := range []struct {
		from, to float64
		want     bool
	}{{0, 3.9, false}, {3, 5, true}, {6.9, 10, true}, {7.1, 10, false}} {
		if got := s.unreadIn("a", at(c.from), at(c.to)); got != c.want {
			t.Errorf("a unread in %.1f-%.1f s: %t, want %t", c.from, c.to, got, c.want)
		}
	}

	ctx := context.Background()
	if err := s.waitPast(ctx, at(4), time.Second); err != nil {
		t.Fatalf("both streams read from 5 s: waitPast(4 s) = %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.waitPast(ctx, at(9), time.Minute) }()
	s.add("EV_0", nil, at(10)) // EV_1 not yet past 9 s
	s.add("EV_1", nil, at(8.5))
	s.add("EV_1", nil, at(10))
	if err := <-done; err != nil {
		t.Fatalf("both streams read from 10 s: waitPast(9 s) = %v", err)
	}
	s.add("EV_0", nil, at(20))
	if err := s.waitPast(ctx, at(15), 10*time.Millisecond); err == nil {
		t.Fatal("EV_1 not read past 15 s: waitPast returned nil")
	}
}
