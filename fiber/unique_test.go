package fiber_test

import (
	"context"
	"errors"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

// TestUnique: a fiber started Unique holds its name while it lives: a
// second Unique fiber of the name is refused (ErrNameTaken), and nothing
// of it is appended; fibers without Unique share names as before; once the
// first ends, the name is free again.
func TestUnique(t *testing.T) {
	e := newEnv(t)
	r, err := fiber.New(fiber.Config{Log: e.lg, Table: e.table, Agent: agent})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	release := make(chan struct{})
	block := func(ctx context.Context, f *fiber.Fiber) error { <-release; return nil }
	if _, err := r.Go(t.Context(), "turn-1", block, fiber.Unique()); err != nil {
		t.Fatal(err)
	}
	before, _ := e.lg.LastSeq(t.Context(), eventlog.Filter{Agent: agent})
	if _, err := r.Go(t.Context(), "turn-1", block, fiber.Unique()); !errors.Is(err, fiber.ErrNameTaken) {
		t.Fatalf("second Unique fiber of the name: %v, want ErrNameTaken", err)
	}
	if after, _ := e.lg.LastSeq(t.Context(), eventlog.Filter{Agent: agent}); after != before {
		t.Fatalf("the refused fiber appended %d events", after-before)
	}
	if _, err := r.Go(t.Context(), "turn-1", func(context.Context, *fiber.Fiber) error { return nil }); err != nil {
		t.Fatalf("a fiber without Unique: %v", err)
	}
	close(release)
	r.Wait()
	if err := r.Run(t.Context(), "turn-1", func(context.Context, *fiber.Fiber) error { return nil }, fiber.Unique()); err != nil {
		t.Fatalf("Unique fiber after the first ended: %v", err)
	}
}

// TestAfterSeq: a fiber started AfterSeq(seq) appends its fiber.started
// only while the agent's last event is seq: after any other write of the
// agent it is refused with eventlog.ErrConflict and appends nothing, and
// started after the last event it runs.
func TestAfterSeq(t *testing.T) {
	e := newEnv(t)
	r, err := fiber.New(fiber.Config{Log: e.lg, Table: e.table, Agent: agent})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	noop := func(context.Context, *fiber.Fiber) error { return nil }
	if err := r.Run(t.Context(), "other", noop); err != nil {
		t.Fatal(err)
	}
	checked, _ := e.lg.LastSeq(t.Context(), eventlog.Filter{Agent: agent})
	if err := r.Run(t.Context(), "another", noop); err != nil { // the log moves on
		t.Fatal(err)
	}
	before, _ := e.lg.LastSeq(t.Context(), eventlog.Filter{Agent: agent})
	if _, err := r.Go(t.Context(), "turn-1", noop, fiber.Unique(), fiber.AfterSeq(checked)); !errors.Is(err, eventlog.ErrConflict) {
		t.Fatalf("fiber after a stale sequence: %v, want ErrConflict", err)
	}
	if after, _ := e.lg.LastSeq(t.Context(), eventlog.Filter{Agent: agent}); after != before {
		t.Fatalf("the refused fiber appended %d events", after-before)
	}
	if _, err := r.Go(t.Context(), "turn-1", noop, fiber.Unique(), fiber.AfterSeq(before)); err != nil {
		t.Fatalf("fiber after the last sequence: %v", err)
	}
	r.Wait()
}
