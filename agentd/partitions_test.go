package agentd

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestPrepareWarmOnceEveryIncomingFuncIs: a partition coming to this node
// is warm once every IncomingFunc called warm (one calls it twice, which
// counts once), and prepare returns when its context ends.
func TestPrepareWarmOnceEveryIncomingFuncIs(t *testing.T) {
	var p partitions
	p.sealed = make(chan struct{})
	first, second := make(chan func(), 1), make(chan func(), 1)
	p.mu.incoming = []IncomingFunc{
		func(ctx context.Context, _ int, warm func()) { first <- warm; <-ctx.Done() },
		func(ctx context.Context, _ int, warm func()) { second <- warm; <-ctx.Done() },
	}
	var warmed atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.prepare(ctx, 3, func() { warmed.Add(1) }); close(done) }()
	select {
	case <-first:
		t.Fatal("an IncomingFunc ran before the daemon sealed its handlers")
	case <-time.After(50 * time.Millisecond): // not a timing assertion: nothing may run at any time
	}
	close(p.sealed)
	w1 := <-first
	w1()
	w1()
	if got := warmed.Load(); got != 0 {
		t.Fatalf("warm called %d times with one IncomingFunc of two warm", got)
	}
	(<-second)()
	if got := warmed.Load(); got != 1 {
		t.Fatalf("warm called %d times with both warm, want 1", got)
	}
	cancel()
	<-done
}
