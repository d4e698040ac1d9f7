package eventlog_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/nats-io/nats.go"
)

// named is counter(version) under another name and filter.
func named(name string, version int, f eventlog.Filter) eventlog.Projection {
	p := counter(version)
	p.Name, p.Filter = name, f
	return p
}

// newFollower returns a Follower of ps on lg.
func newFollower(t *testing.T, lg *eventlog.Log, ps ...eventlog.Projection) *eventlog.Follower {
	t.Helper()
	f, err := lg.NewFollower()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if err := f.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// checkViews checks that every view equals the fold of the events its
// filter selects, and that its stored cursor is want.
func checkViews(t *testing.T, lg *eventlog.Log, want eventlog.Seq, ps ...eventlog.Projection) {
	t.Helper()
	for _, p := range ps {
		evs, err := lg.Read(t.Context(), p.Filter, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := dump(t, lg, p.Name), fold(evs); !equalMaps(got, want) {
			t.Errorf("view %s = %v, want %v", p.Name, got, want)
		}
		if got, err := eventlog.StoredCursor(lg, p.Name); err != nil || got != want {
			t.Errorf("stored cursor of %s = %d (%v), want %d", p.Name, got, err, want)
		}
	}
}

// One follower feeds every view from one consumer, each event to the views
// whose filter selects it, and WaitFor waits for all of them.
func TestFollowerAppliesEveryView(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	appendN(t, lg, 1200, 3) // more than one commit group
	ps := []eventlog.Projection{
		named("all1", 1, eventlog.Filter{}),
		named("all2", 1, eventlog.Filter{}),
		named("agent1", 1, eventlog.Filter{Agent: "agent1"}),
	}
	f := newFollower(t, lg, ps...)
	if got, want := f.Names(), []string{"all1", "all2", "agent1"}; len(got) != 3 || got[2] != want[2] {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	eventlogtest.RunFollower(t, f)
	if got := f.Cursor(); got != 1200 {
		t.Fatalf("cursor after ready = %d, want 1200", got)
	}
	seq, err := lg.Append(t.Context(), eventlog.Event{Agent: "agent1", Type: "tick", Data: json.RawMessage(`"x"`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WaitFor(t.Context(), seq); err != nil {
		t.Fatal(err)
	}
	checkViews(t, lg, seq, ps...)
}

// Add rejects what cannot share the follower; Run without views and Add
// after Run are errors.
func TestFollowerAddErrors(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	f := newFollower(t, lg, named("events", 1, eventlog.Filter{}))
	for _, tc := range []struct {
		name string
		p    eventlog.Projection
	}{
		{"other stream", named("chunks", 1, eventlog.Filter{Chunks: true})},
		{"duplicate", named("events", 1, eventlog.Filter{})},
		{"bad name", named("a.b", 1, eventlog.Filter{})},
		{"no apply", eventlog.Projection{Name: "noapply"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := f.Add(tc.p); !errors.Is(err, eventlog.ErrInvalid) {
				t.Fatalf("Add = %v, want ErrInvalid", err)
			}
		})
	}
	empty, err := lg.NewFollower()
	if err != nil {
		t.Fatal(err)
	}
	if err := empty.Run(t.Context()); !errors.Is(err, eventlog.ErrInvalid) {
		t.Fatalf("Run without projections = %v, want ErrInvalid", err)
	}
	if err := empty.Add(named("late", 1, eventlog.Filter{})); !errors.Is(err, eventlog.ErrInvalid) {
		t.Fatalf("Add after Run = %v, want ErrInvalid", err)
	}
	if err := f.Rebuild(t.Context(), "nosuch"); !errors.Is(err, eventlog.ErrInvalid) {
		t.Fatalf("Rebuild of an unknown view = %v, want ErrInvalid", err)
	}
}

// reopener returns a func that opens a log over nc on one data dir each
// time: the views of the one before it, reopened.
func reopener(t *testing.T, nc *nats.Conn) func() *eventlog.Log {
	dir := t.TempDir()
	return func() *eventlog.Log {
		lg, err := eventlog.Open(t.Context(), eventlog.Config{Conn: nc, Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return lg
	}
}

// runFollower runs a follower of ps until ready, calls during (when set), and
// stops it.
func runFollower(t *testing.T, lg *eventlog.Log, during func(*eventlog.Follower), ps ...eventlog.Projection) {
	t.Helper()
	f := newFollower(t, lg, ps...)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	select {
	case <-f.Ready():
	case err := <-done:
		t.Fatalf("follower stopped: %v", err)
	}
	if during != nil {
		during(f)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := f.WaitFor(t.Context(), f.Cursor()+1); !errors.Is(err, eventlog.ErrStopped) {
		t.Fatalf("WaitFor after stop = %v, want ErrStopped", err)
	}
}

// Views at different cursors (built by Projectors, added later, or whose
// Version changed) catch up alone to the others, then all go on together.
func TestFollowerCatchesUpViewsBehind(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	open := reopener(t, eventlogtest.Connect(t, s))
	a, b := named("a", 1, eventlog.Filter{}), named("b", 1, eventlog.Filter{Agent: "agent2"})
	lg := open()
	appendN(t, lg, 700, 3)
	runUntilReady(t, lg, a, nil) // a Projector
	lg.Close()

	// b alone, later: the two views stand at different cursors.
	lg = open()
	appendN(t, lg, 300, 3)
	runFollower(t, lg, nil, b)
	lg.Close()

	lg = open()
	appendN(t, lg, 50, 3)
	c, a2 := named("c", 1, eventlog.Filter{}), named("a", 2, eventlog.Filter{})
	runFollower(t, lg, nil, a2, b, c)
	checkViews(t, lg, 1050, a2, b, c)
	lg.Close()

	// A view rebuilt on demand catches up while the others wait, then
	// follows live events with them.
	lg = open()
	defer lg.Close()
	runFollower(t, lg, func(f *eventlog.Follower) {
		if err := f.Rebuild(t.Context(), "b"); err != nil {
			t.Fatal(err)
		}
		seq, err := lg.Append(t.Context(), eventlog.Event{Agent: "agent2", Type: "tick", Data: json.RawMessage(`"y"`)})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.WaitFor(t.Context(), seq); err != nil {
			t.Fatal(err)
		}
		checkViews(t, lg, seq, a2, b, c)
	}, a2, b, c)
}

// A corrupt stored event is skipped and counted by every view it would have
// reached, and recorded in the quarantine naming its sequence and those
// views; the events around it apply and the cursor moves past it.
func TestFollowerCorruptStoredEvent(t *testing.T) {
	lg, s := eventlogtest.Open(t, eventlog.Config{})
	appendN(t, lg, 2, 1)
	raw := eventlogtest.Connect(t, s)
	if _, err := raw.Request("forever.evt.agent0", []byte("{not json"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	appendN(t, lg, 2, 1)
	f := newFollower(t, lg, named("x", 1, eventlog.Filter{}), named("y", 1, eventlog.Filter{Agent: "agent0"}))
	eventlogtest.RunFollower(t, f)
	for _, name := range []string{"x", "y"} {
		if got := dump(t, lg, name)["n/agent0"]; got != "4" {
			t.Errorf("view %s count = %q, want 4", name, got)
		}
	}
	if got := f.Cursor(); got != 5 {
		t.Fatalf("cursor = %d, want 5", got)
	}
	var qs []eventlog.Quarantined
	for q, err := range lg.Quarantine() {
		if err != nil {
			t.Fatal(err)
		}
		qs = append(qs, q)
	}
	if len(qs) != 1 || qs[0].Seq != 3 || qs[0].Stream != "FOREVER_EVENTS" || qs[0].Subject != "forever.evt.agent0" ||
		!slices.Equal(qs[0].Views, []string{"x", "y"}) || qs[0].Error == "" {
		t.Fatalf("quarantine = %+v, want the event at seq 3 for views x and y", qs)
	}
}

// An Apply error stops the follower with an error naming the view; WaitFor
// then returns it.
func TestFollowerApplyError(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	appendN(t, lg, 3, 1)
	boom := errors.New("boom")
	bad := eventlog.Projection{Name: "bad", Version: 1, Apply: func(*eventlog.Batch, eventlog.Event) error { return boom }}
	f := newFollower(t, lg, named("good", 1, eventlog.Filter{}), bad)
	if err := f.Run(t.Context()); !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want boom", err)
	}
	if err := f.WaitFor(t.Context(), 1); !errors.Is(err, boom) {
		t.Fatalf("WaitFor after failed Run = %v, want boom", err)
	}
	if got, _ := eventlog.StoredCursor(lg, "good"); got != 0 {
		t.Fatalf("good view's cursor = %d after a failed group, want 0", got)
	}
}

// TestCatchUpPastAQuietConsumer: a view catching up to the others is not
// held by a consumer that delivers nothing (JetStream placed it on a
// replica still catching up itself, as on a node just restarted): after
// renewAfter the catch-up recreates it from its last applied event. In a
// 6-node chaos run a restarted node's startup catch-up waited so 20 s,
// and every partition handed to it with it. Here the first consumer holds
// its first event until its follow ends, which without the renewal is
// the end of the test's context.
func TestCatchUpPastAQuietConsumer(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	open := reopener(t, eventlogtest.Connect(t, s))
	a, b := named("a", 1, eventlog.Filter{}), named("b", 1, eventlog.Filter{})
	lg := open()
	appendN(t, lg, 200, 3)
	runFollower(t, lg, nil, a)
	lg.Close()

	// b is new: it catches up from 0 to a's cursor, through a consumer
	// whose first follow delivers nothing until it ends.
	lg = open()
	defer lg.Close()
	var first sync.Once
	var held context.Context
	eventlog.FollowDelivered(lg, func(fctx context.Context, e *eventlog.Event) {
		first.Do(func() { held = fctx })
		if fctx == held {
			<-fctx.Done()
		}
	})
	f := newFollower(t, lg, a, b)
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	select {
	case <-f.Ready():
	case err := <-done:
		t.Fatalf("follower stopped before it was ready: %v", err)
	case <-ctx.Done():
		t.Fatal("the catch-up waited on its quiet consumer until the test's end")
	}
	cancel()
	<-done
	checkViews(t, lg, 200, a, b)
}
