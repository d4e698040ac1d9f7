package fiber_test

import (
	"context"
	"testing"

	"github.com/forever-agents/forever/fiber"
)

// TestIdle: an idle fiber holds no keepalive reference, busy takes one
// back, and a Runner closed while its fiber is idle leaves the fiber's row
// for recovery with nothing appended for its end.
func TestIdle(t *testing.T) {
	e := newEnv(t)
	ka := &keepAlive{}
	r := e.runner(t, fiber.Config{KeepAlive: ka})
	idle, resume := make(chan struct{}), make(chan struct{})
	busyAgain := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- r.Run(context.Background(), "waits", func(ctx context.Context, f *fiber.Fiber) error {
			busy := f.Idle()
			close(idle)
			<-resume
			busy()
			busy() // a second call does nothing
			close(busyAgain)
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	<-idle
	if held, _ := ka.counts(); held != 0 {
		t.Fatalf("keepalive refs held while idle = %d, want 0", held)
	}
	close(resume)
	<-busyAgain
	if held, _ := ka.counts(); held != 1 {
		t.Fatalf("keepalive refs held after busy = %d, want 1", held)
	}
	r.Close()
	if err := <-done; err == nil {
		t.Fatal("the closed fiber returned nil")
	}
	if held, _ := ka.counts(); held != 0 {
		t.Fatalf("keepalive refs held after Close = %d, want 0", held)
	}
	if rows := e.rows(t); len(rows) != 1 || rows[0].Name != "waits" {
		t.Fatalf("rows after Close = %+v, want the interrupted fiber's", rows)
	}
	if ends := e.events(t, fiber.EventCompleted, fiber.EventFailed); len(ends) != 0 {
		t.Fatalf("end events of an interrupted idle fiber: %+v", ends)
	}
}

// TestIdleThenEnd: a fiber that ends while idle releases nothing twice,
// and a busy after its end takes no reference.
func TestIdleThenEnd(t *testing.T) {
	e := newEnv(t)
	ka := &keepAlive{}
	r := e.runner(t, fiber.Config{KeepAlive: ka})
	var busy func()
	if err := r.Run(t.Context(), "ends idle", func(ctx context.Context, f *fiber.Fiber) error {
		busy = f.Idle()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	busy()
	if held, acquired := ka.counts(); held != 0 || acquired != 1 {
		t.Fatalf("keepalive held, acquired = %d, %d; want 0, 1", held, acquired)
	}
}
