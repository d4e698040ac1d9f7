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
