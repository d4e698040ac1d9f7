package keepalive_test

import (
	"context"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/keepalive"
	"github.com/forever-agents/forever/keepalive/keepalivetest"
)

// A Scheduler whose view joins a shared Follower does not run a projector of
// its own: the Follower's owner runs it, and the Scheduler waits on it.
func TestSchedulerOnSharedViews(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	views, err := lg.NewFollower()
	if err != nil {
		t.Fatal(err)
	}
	fires := make(chan keepalive.Schedule, 1)
	clk := keepalivetest.NewClock(t0)
	s, err := keepalive.NewScheduler(keepalive.SchedulerConfig{
		Log: lg, Views: views, Clock: clk,
		Fire: func(_ context.Context, sc keepalive.Schedule) error { fires <- sc; return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Projector() != nil {
		t.Fatal("Projector() is not nil with shared views")
	}
	if got := views.Names(); len(got) != 1 || got[0] != keepalive.ProjectionName {
		t.Fatalf("views.Names() = %v, want [%s]", got, keepalive.ProjectionName)
	}
	eventlogtest.RunFollower(t, views)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	sc, err := s.Schedule(t.Context(), "a1", keepalive.Spec{Kind: keepalive.KindDelay, Delay: time.Minute, Callback: "ping"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WaitFor(t.Context(), views.Cursor()); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	select {
	case got := <-fires:
		if got.ID != sc.ID {
			t.Fatalf("fired %s, want %s", got.ID, sc.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("schedule did not fire")
	}
}
