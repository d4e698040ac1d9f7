package modellimit_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/forever-agents/forever/modellimit"
	"github.com/forever-agents/forever/modellimit/modellimittest"
	"github.com/prometheus/client_golang/prometheus"
)

// eventually polls cond until it holds, failing after 10 s: it waits for
// goroutines to settle, it measures no time.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitfor.True(t, what, cond)
}

const model = "local/local"

// callers runs n goroutines for each tenant that call Wait and done in a
// loop until ctx ends.
func callers(ctx context.Context, wg *sync.WaitGroup, n int, tenants ...*modellimit.Tenant) {
	for _, tn := range tenants {
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					done, err := tn.Wait(ctx, model, 0)
					if err != nil {
						return
					}
					done(llm.Usage{}, nil)
				}
			}()
		}
	}
}

// rounds advances clk one second at a time, k times, waiting after each
// round until every caller is back in a queue (waiting, its timer taken)
// with the round's calls granted.
func rounds(t *testing.T, clk *modellimittest.Clock, k, perRound, callers int, granted func() int64, waiting func() int64) {
	t.Helper()
	settle := func(want int64) {
		eventually(t, "the callers to queue again", func() bool {
			return granted() == want && waiting() == int64(callers) && clk.Pending() >= callers
		})
	}
	base := granted()
	settle(base)
	for i := 1; i <= k; i++ {
		clk.Advance(time.Second)
		settle(base + int64(i*perRound))
	}
}

func newLimiter(t *testing.T, cfg modellimit.Config) *modellimit.Limiter {
	t.Helper()
	l, err := modellimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Two tenants of weights 1 and 3, both always waiting, get calls in a
// 1:3 ratio within 10% (the invariant says within one call).
func TestWeightedShare(t *testing.T) {
	clk := modellimittest.NewClock()
	l := newLimiter(t, modellimit.Config{Calls: modellimit.Rate{N: 10, Per: time.Second}, Clock: clk})
	light, heavy := l.Tenant("light", 1), l.Tenant("heavy", 3)
	// The first second's burst goes to nobody under test.
	warm := l.Tenant("warm", 1)
	for range 10 {
		done, err := warm.Wait(t.Context(), model, 0)
		if err != nil {
			t.Fatal(err)
		}
		done(llm.Usage{}, nil)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	const n = 12
	callers(ctx, &wg, n, light, heavy)
	granted := func() int64 { return light.Stats().Granted + heavy.Stats().Granted }
	waiting := func() int64 { return light.Stats().Waiting + heavy.Stats().Waiting }
	rounds(t, clk, 40, 10, 2*n, granted, waiting)
	lg, hg := light.Stats().Granted, heavy.Stats().Granted
	if lg+hg != 400 {
		t.Fatalf("granted %d calls, want 400 (40 s at 10/s)", lg+hg)
	}
	ratio := float64(hg) / float64(lg)
	t.Logf("light %d, heavy %d: ratio %.3f", lg, hg, ratio)
	if math.Abs(ratio-3)/3 > 0.10 {
		t.Fatalf("heavy:light = %d:%d = %.3f, want 3 within 10%%", hg, lg, ratio)
	}
	if d := math.Abs(float64(hg) - 3*float64(lg)); d > 4 {
		t.Errorf("heavy %d is %v calls off 3 × light %d, want within one call each side", hg, d, lg)
	}
}

// An idle tenant's share is used by the other: the light tenant alone
// gets every call of the bound, not its quarter.
func TestIdleShareUsed(t *testing.T) {
	clk := modellimittest.NewClock()
	l := newLimiter(t, modellimit.Config{Calls: modellimit.Rate{N: 10, Per: time.Second}, Clock: clk})
	light, heavy := l.Tenant("light", 1), l.Tenant("heavy", 3)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	const n = 12
	callers(ctx, &wg, n, light)
	granted := func() int64 { return light.Stats().Granted }
	waiting := func() int64 { return light.Stats().Waiting }
	// The burst first: a quiet limiter's second of calls at once.
	eventually(t, "the burst", func() bool { return granted() == 10 })
	rounds(t, clk, 10, 10, n, granted, waiting)
	if got, want := light.Stats().Granted, int64(110); got != want {
		t.Fatalf("light got %d calls with heavy idle, want every call of the bound: %d", got, want)
	}
	if got := heavy.Stats().Granted; got != 0 {
		t.Fatalf("heavy got %d calls, want 0", got)
	}
	// Back from idle, heavy earns no credit: from the next round the
	// ratio is 3:1 at once, not all calls to heavy.
	callers(ctx, &wg, n, heavy)
	both := func() int64 { return light.Stats().Granted + heavy.Stats().Granted }
	bothWaiting := func() int64 { return light.Stats().Waiting + heavy.Stats().Waiting }
	l0 := light.Stats().Granted
	rounds(t, clk, 4, 10, 2*n, both, bothWaiting)
	if got := light.Stats().Granted - l0; got < 9 || got > 11 {
		t.Fatalf("light got %d of 40 calls after heavy came back, want its quarter, 10", got)
	}
}

// A 429 with Retry-After 2 s pauses the model for every tenant for 2 s:
// no call goes after 1 s, the next one goes at 2 s.
func TestRetryAfterPauses(t *testing.T) {
	clk := modellimittest.NewClock()
	reg := prometheus.NewRegistry()
	l := newLimiter(t, modellimit.Config{Calls: modellimit.Rate{N: 100, Per: time.Second}, Clock: clk, Registerer: reg})
	a, b := l.Tenant("a", 1), l.Tenant("b", 1)
	t0 := clk.Now()
	done, err := a.Wait(t.Context(), model, 0)
	if err != nil {
		t.Fatal(err)
	}
	done(llm.Usage{}, &llm.Error{Provider: "local", Retryable: true, Status: 429, RetryAfter: 2 * time.Second})
	ps := l.Pauses()
	if len(ps) != 1 || !ps[0].Until.Equal(t0.Add(2*time.Second)) || ps[0].RetryAfter != 2*time.Second {
		t.Fatalf("pauses %+v, want one until t0+2s", ps)
	}
	got := make(chan error, 1)
	go func() {
		done, err := b.Wait(t.Context(), model, 0) // the other tenant waits too
		if err == nil {
			done(llm.Usage{}, nil)
		}
		got <- err
	}()
	eventually(t, "b waiting", func() bool { return b.Stats().Waiting == 1 && clk.Pending() == 1 })
	clk.Advance(time.Second)
	eventually(t, "b waiting again", func() bool { return clk.Pending() == 1 })
	if s := b.Stats(); s.Granted != 0 {
		t.Fatalf("b granted during the pause: %+v", s)
	}
	clk.Advance(time.Second)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	s := b.Stats()
	if s.Paused != 1 || !s.LastGrant.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("b: %+v, want one call held by the pause, let through at t0+2s", s)
	}
	if got := metric(t, reg, "forever_model_limiter_throttled_total"); got != 1 {
		t.Fatalf("throttled %v, want 1", got)
	}
	if got := metric(t, reg, "forever_model_limiter_paused_seconds_total"); got != 2 {
		t.Fatalf("paused %v s, want 2", got)
	}
}

// A Wait whose ctx ends leaves its queue; the next caller is not held
// behind it.
func TestWaitCancelled(t *testing.T) {
	clk := modellimittest.NewClock()
	l := newLimiter(t, modellimit.Config{Calls: modellimit.Rate{N: 1, Per: time.Second}, Clock: clk})
	a := l.Tenant("a", 1)
	done, err := a.Wait(t.Context(), model, 0)
	if err != nil {
		t.Fatal(err)
	}
	done(llm.Usage{}, nil)
	ctx, cancel := context.WithCancelCause(t.Context())
	stop := errors.New("stopped")
	got := make(chan error, 1)
	go func() { _, err := a.Wait(ctx, model, 0); got <- err }()
	eventually(t, "a waiting", func() bool { return a.Stats().Waiting == 1 })
	cancel(stop)
	if err := <-got; !errors.Is(err, stop) {
		t.Fatalf("Wait returned %v, want the ctx's cause", err)
	}
	if s := a.Stats(); s.Waiting != 0 || s.Granted != 1 {
		t.Fatalf("stats %+v, want nothing waiting and one grant", s)
	}
}

// A tokens bound: a call's real usage past its estimate is owed by the
// next calls.
func TestTokensOwed(t *testing.T) {
	clk := modellimittest.NewClock()
	l := newLimiter(t, modellimit.Config{Tokens: modellimit.Rate{N: 100, Per: time.Second}, Clock: clk})
	a := l.Tenant("a", 1)
	done, err := a.Wait(t.Context(), model, 10)
	if err != nil {
		t.Fatal(err)
	}
	done(llm.Usage{InputTokens: 10, OutputTokens: 290}, nil) // 200 owed past the burst of 100
	got := make(chan error, 1)
	go func() {
		done, err := a.Wait(t.Context(), model, 10)
		if err == nil {
			done(llm.Usage{InputTokens: 10}, nil)
		}
		got <- err
	}()
	eventually(t, "a waiting", func() bool { return a.Stats().Waiting == 1 && clk.Pending() == 1 })
	clk.Advance(time.Second) // level -200 + 100 = -100: still owed
	eventually(t, "a waiting again", func() bool { return clk.Pending() == 1 })
	if a.Stats().Granted != 1 {
		t.Fatal("the second call went while tokens were owed")
	}
	clk.Advance(2 * time.Second)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want modellimit.Rate
		err  bool
	}{
		{in: "10/s", want: modellimit.Rate{N: 10, Per: time.Second}},
		{in: "90000/m", want: modellimit.Rate{N: 90000, Per: time.Minute}},
		{in: "1/2s", want: modellimit.Rate{N: 1, Per: 2 * time.Second}},
		{in: "", want: modellimit.Rate{}},
		{in: "0", want: modellimit.Rate{}},
		{in: "10", err: true},
		{in: "-1/s", err: true},
		{in: "1/0s", err: true},
		{in: "x/s", err: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := modellimit.ParseRate(tc.in)
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("ParseRate(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
			}
			if err == nil && !got.IsZero() {
				back, _ := modellimit.ParseRate(got.String())
				if back != got {
					t.Fatalf("String %q reads back as %v", got.String(), back)
				}
			}
		})
	}
}

// metric is the sum of the counter name's series in reg.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// Each node takes its share of the cluster's bound: with two live nodes,
// 5 of the 10 calls a second.
func TestShareAmongNodes(t *testing.T) {
	clk := modellimittest.NewClock()
	l := newLimiter(t, modellimit.Config{Calls: modellimit.Rate{N: 10, Per: time.Second}, Clock: clk})
	l.ShareAmong(func() []string { return []string{"n1", "n2"} })
	a := l.Tenant("a", 1)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	const n = 8
	callers(ctx, &wg, n, a)
	granted := func() int64 { return a.Stats().Granted }
	waiting := func() int64 { return a.Stats().Waiting }
	eventually(t, "the burst", func() bool { return granted() == 5 })
	rounds(t, clk, 4, 5, n, granted, waiting)
	if got := a.Stats().Granted; got != 25 {
		t.Fatalf("granted %d in 4 s after the burst, want 25 (5/s, half of 10/s)", got)
	}
}
