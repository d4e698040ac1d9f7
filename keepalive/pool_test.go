package keepalive_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forever-agents/forever/keepalive"
	"github.com/forever-agents/forever/keepalive/keepalivetest"
	"github.com/prometheus/client_golang/prometheus"
)

var t0 = time.Date(2025, 1, 1, 0, 1, 0, 0, time.UTC)

// beats records heartbeat calls.
type beats struct {
	calls chan string
	mu    sync.Mutex
	err   error // returned by heartbeat
}

func (b *beats) setErr(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.err = err
}

func (b *beats) heartbeat(ctx context.Context, agent string) error {
	b.calls <- agent
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

func newPool(t *testing.T, cfg keepalive.PoolConfig) (*keepalive.Pool, *keepalivetest.Clock, *beats) {
	t.Helper()
	clk := keepalivetest.NewClock(t0)
	b := &beats{calls: make(chan string, 100)}
	cfg.Clock = clk
	if cfg.HeartbeatTimeout == 0 {
		// Far from Interval, so waitTimers sees only the interval timer,
		// never the timer bounding a heartbeat in progress.
		cfg.HeartbeatTimeout = time.Hour
	}
	if cfg.Heartbeat == nil {
		cfg.Heartbeat = b.heartbeat
	}
	p, err := keepalive.NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, clk, b
}

// waitTimers waits for n timers due within a minute: heartbeat interval
// timers, not those bounding a heartbeat call (newPool's HeartbeatTimeout is
// an hour).
func waitTimers(t *testing.T, clk *keepalivetest.Clock, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := clk.WaitTimersWithin(ctx, n, time.Minute); err != nil {
		t.Fatalf("waiting for %d timers (have %d): %v", n, clk.Timers(), err)
	}
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func TestPoolTwoRefsReleaseOneKeepsHeartbeat(t *testing.T) {
	p, clk, b := newPool(t, keepalive.PoolConfig{Interval: time.Second})
	k := p.For("a1")
	r1 := k.Acquire()
	r2 := k.Acquire()
	if got, want := k.Held(), 2; got != want {
		t.Fatalf("Held = %d, want %d", got, want)
	}
	r1()
	if got, want := k.Held(), 1; got != want {
		t.Fatalf("Held after one release = %d, want %d", got, want)
	}
	for i := range 3 {
		waitTimers(t, clk, 1)
		clk.Advance(time.Second)
		if got := recv(t, b.calls, "heartbeat"); got != "a1" {
			t.Fatalf("heartbeat %d for %q, want a1", i, got)
		}
	}
	select {
	case <-k.Idle():
		t.Fatal("idle while a ref is held")
	default:
	}
	r2()
	if got := k.Held(); got != 0 {
		t.Fatalf("Held = %d, want 0", got)
	}
}

func TestPoolReleaseIsIdempotent(t *testing.T) {
	reg := prometheus.NewRegistry()
	p, _, _ := newPool(t, keepalive.PoolConfig{Registerer: reg})
	a := p.Acquire("a1")
	b := p.Acquire("a1")
	a()
	a()
	a()
	if got, want := p.Held("a1"), 1; got != want {
		t.Fatalf("Held after releasing one ref thrice = %d, want %d", got, want)
	}
	b()
	b()
	if got := p.Held("a1"); got != 0 {
		t.Fatalf("Held = %d, want 0", got)
	}
	if got := p.Total(); got != 0 {
		t.Fatalf("Total = %d, want 0", got)
	}
	if got := metricValue(t, reg, "forever_keepalive_refs", ""); got != 0 {
		t.Fatalf("forever_keepalive_refs = %v, want 0", got)
	}
}

// metricValue returns the value of the gauge or counter name (with label
// outcome=outcome when outcome is set) gathered from reg, 0 when absent.
func metricValue(t *testing.T, reg *prometheus.Registry, name, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := outcome == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					match = true
				}
			}
			if !match {
				continue
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func TestPoolCountNeverNegative(t *testing.T) {
	reg := prometheus.NewRegistry()
	p, _, _ := newPool(t, keepalive.PoolConfig{Registerer: reg, Heartbeat: func(context.Context, string) error { return nil }})
	var wg sync.WaitGroup
	var maxSeen atomic.Int64
	for g := range 8 {
		wg.Go(func() {
			agent := []string{"a1", "a2"}[g%2]
			for range 200 {
				r := p.Acquire(agent)
				if n := p.Held(agent); n < 1 {
					t.Errorf("Held = %d while holding a ref", n)
				}
				maxSeen.Store(max(maxSeen.Load(), int64(p.Total())))
				r()
				r()
				if n := p.Held(agent); n < 0 {
					t.Errorf("Held = %d", n)
				}
			}
		})
	}
	wg.Wait()
	for _, a := range []string{"a1", "a2"} {
		if got := p.Held(a); got != 0 {
			t.Errorf("Held(%s) = %d, want 0", a, got)
		}
		<-p.Idle(a)
	}
	if got := p.Total(); got != 0 {
		t.Errorf("Total = %d, want 0", got)
	}
	if got := metricValue(t, reg, "forever_keepalive_refs", ""); got != 0 {
		t.Errorf("forever_keepalive_refs = %v, want 0", got)
	}
}

func TestPoolWhile(t *testing.T) {
	p, _, _ := newPool(t, keepalive.PoolConfig{})
	k := p.For("a1")
	errBoom := errors.New("boom")
	tests := []struct {
		name    string
		fn      func(ctx context.Context) error
		wantErr error
		panics  bool
	}{
		{name: "ok", fn: func(context.Context) error { return nil }},
		{name: "error", fn: func(context.Context) error { return errBoom }, wantErr: errBoom},
		{name: "panic", fn: func(context.Context) error { panic("boom") }, panics: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var held int
			var err error
			func() {
				defer func() {
					if r := recover(); (r != nil) != tt.panics {
						t.Fatalf("recovered %v, want panic %v", r, tt.panics)
					}
				}()
				err = k.While(t.Context(), func(ctx context.Context) error {
					held = k.Held()
					return tt.fn(ctx)
				})
			}()
			if held != 1 {
				t.Errorf("Held inside While = %d, want 1", held)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("While = %v, want %v", err, tt.wantErr)
			}
			if got := k.Held(); got != 0 {
				t.Errorf("Held after While = %d, want 0", got)
			}
		})
	}
}

func TestPoolHeartbeatStopsAtZero(t *testing.T) {
	idle := make(chan string, 10)
	p, clk, b := newPool(t, keepalive.PoolConfig{Interval: time.Second, OnIdle: func(a string) { idle <- a }})
	r := p.Acquire("a1")
	waitTimers(t, clk, 1)
	clk.Advance(time.Second)
	recv(t, b.calls, "heartbeat")
	waitTimers(t, clk, 1)
	r()
	// release returned: the goroutine has exited and stopped its timer.
	if got := clk.Timers(); got != 0 {
		t.Fatalf("timers after last release = %d, want 0", got)
	}
	if got := recv(t, idle, "OnIdle"); got != "a1" {
		t.Fatalf("OnIdle(%q), want a1", got)
	}
	select {
	case <-p.Idle("a1"):
	default:
		t.Fatal("Idle channel open after last release")
	}
	clk.Advance(time.Hour)
	select {
	case a := <-b.calls:
		t.Fatalf("heartbeat for %s after last release", a)
	default:
	}
}

func TestPoolReleaseWaitsForHeartbeatInProgress(t *testing.T) {
	started := make(chan struct{})
	var returned atomic.Bool
	p, clk, _ := newPool(t, keepalive.PoolConfig{Interval: time.Second, Heartbeat: func(ctx context.Context, _ string) error {
		close(started)
		<-ctx.Done() // a slow lease renewal, cancelled by the release
		returned.Store(true)
		return ctx.Err()
	}})
	r := p.Acquire("a1")
	idle := p.Idle("a1")
	waitTimers(t, clk, 1)
	clk.Advance(time.Second)
	recv(t, started, "heartbeat start")
	r()
	if !returned.Load() {
		t.Fatal("release returned before the heartbeat goroutine exited")
	}
	<-idle
	if err := p.Err("a1"); err != nil {
		t.Fatalf("Err after a cancelled heartbeat = %v, want nil", err)
	}
}

func TestPoolHeartbeatErrorSurfaces(t *testing.T) {
	errs := make(chan error, 10)
	p, clk, b := newPool(t, keepalive.PoolConfig{Interval: time.Second, OnHeartbeatError: func(a string, err error) { errs <- err }})
	expires := t0.Add(time.Minute)
	b.setErr(&keepalive.LeaseLostError{Owner: "node-2", ExpiresAt: expires})
	k := p.For("a1")
	r := k.Acquire()
	defer r()
	waitTimers(t, clk, 1)
	clk.Advance(time.Second)
	recv(t, b.calls, "heartbeat")
	err := recv(t, errs, "OnHeartbeatError")
	if !errors.Is(err, keepalive.ErrLeaseLost) {
		t.Fatalf("OnHeartbeatError(%v), want ErrLeaseLost", err)
	}
	var lost *keepalive.LeaseLostError
	if !errors.As(k.Err(), &lost) || lost.Owner != "node-2" || !lost.ExpiresAt.Equal(expires) {
		t.Fatalf("Err() = %v, want LeaseLostError{node-2, %v}", k.Err(), expires)
	}
	// The next successful heartbeat clears it.
	b.setErr(nil)
	waitTimers(t, clk, 1)
	clk.Advance(time.Second)
	recv(t, b.calls, "heartbeat")
	waitTimers(t, clk, 1) // the goroutine recorded the result and waits again
	if err := k.Err(); err != nil {
		t.Fatalf("Err() after a good heartbeat = %v", err)
	}
}

// TestPoolGenerationsNeverOverlap re-acquires while the previous heartbeat
// goroutine is still stopping, with a real clock, and checks that no two
// heartbeat calls of one agent ever run at once.
func TestPoolGenerationsNeverOverlap(t *testing.T) {
	var running, overlaps atomic.Int32
	// HeartbeatTimeout is far away: a call abandoned as hung may overlap the
	// next by design, and this test is about generations.
	p, err := keepalive.NewPool(keepalive.PoolConfig{Interval: time.Microsecond, HeartbeatTimeout: time.Hour, Heartbeat: func(ctx context.Context, _ string) error {
		if running.Add(1) > 1 {
			overlaps.Add(1)
		}
		defer running.Add(-1)
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Microsecond):
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 300 {
				p.Acquire("a1")()
			}
		})
	}
	wg.Wait()
	<-p.Idle("a1")
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d overlapping heartbeat calls", n)
	}
}

// TestPoolHungHeartbeatReported checks that a heartbeat call that never
// returns (it ignores its ctx) is reported as an ErrHung heartbeat error once
// HeartbeatTimeout passes, that the next heartbeat runs an interval later,
// and that release does not wait for the abandoned call.
func TestPoolHungHeartbeatReported(t *testing.T) {
	reg := prometheus.NewRegistry()
	errs := make(chan error, 10)
	calls := make(chan int, 10)
	hold := make(chan struct{}) // the first call blocks on it, ignoring ctx
	var n atomic.Int32
	p, clk, _ := newPool(t, keepalive.PoolConfig{
		Interval:         time.Second,
		HeartbeatTimeout: 2 * time.Minute, // beyond waitTimers' window
		Registerer:       reg,
		OnHeartbeatError: func(_ string, err error) { errs <- err },
		Heartbeat: func(ctx context.Context, _ string) error {
			i := int(n.Add(1))
			calls <- i
			if i == 1 {
				<-hold
			}
			return nil
		},
	})
	t.Cleanup(func() { close(hold) }) // before newPool's Close
	k := p.For("a1")
	r := k.Acquire()
	waitTimers(t, clk, 1)
	clk.Advance(time.Second)
	if got := recv(t, calls, "first heartbeat"); got != 1 {
		t.Fatalf("heartbeat call %d, want 1", got)
	}
	clk.Advance(2 * time.Minute) // the first call's bound
	err := recv(t, errs, "OnHeartbeatError")
	if !errors.Is(err, keepalive.ErrHung) {
		t.Fatalf("OnHeartbeatError(%v), want ErrHung", err)
	}
	if !errors.Is(k.Err(), keepalive.ErrHung) {
		t.Fatalf("Err() = %v, want ErrHung", k.Err())
	}
	if got := metricValue(t, reg, "forever_keepalive_heartbeats_total", "hung"); got != 1 {
		t.Fatalf("heartbeats_total{hung} = %v, want 1", got)
	}
	// A fresh heartbeat one interval later, while the first still hangs.
	waitTimers(t, clk, 1)
	clk.Advance(time.Second)
	if got := recv(t, calls, "next heartbeat"); got != 2 {
		t.Fatalf("heartbeat call %d, want 2", got)
	}
	waitTimers(t, clk, 1) // the result is recorded, the next interval waits
	if err := k.Err(); err != nil {
		t.Fatalf("Err() after a good heartbeat = %v", err)
	}
	r() // returns although the first call still hangs
	<-k.Idle()
}

func TestPoolConfigValidate(t *testing.T) {
	if _, err := keepalive.NewPool(keepalive.PoolConfig{Interval: -time.Second}); !errors.Is(err, keepalive.ErrInvalid) {
		t.Fatalf("NewPool(negative interval) = %v, want ErrInvalid", err)
	}
	if _, err := keepalive.NewPool(keepalive.PoolConfig{HeartbeatTimeout: -time.Second}); !errors.Is(err, keepalive.ErrInvalid) {
		t.Fatalf("NewPool(negative heartbeat timeout) = %v, want ErrInvalid", err)
	}
}

func ExampleKeeper_While() {
	pool, _ := keepalive.NewPool(keepalive.PoolConfig{})
	defer pool.Close()
	k := pool.For("agent-1")
	_ = k.While(context.Background(), func(ctx context.Context) error {
		fmt.Println("held:", k.Held())
		return nil
	})
	fmt.Println("held:", k.Held())
	// Output:
	// held: 1
	// held: 0
}
