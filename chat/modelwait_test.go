package chat_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/forever-agents/forever/modellimit"
)

var _ chat.ModelLimiter = (*modellimit.Tenant)(nil)

// A provider's 429 with Retry-After: 2 does not fail the turn: the
// limiter holds the model's calls for 2 s, the status says the turn waits,
// and the turn completes. Rate-limited answers count no recovery attempt:
// three in a row, past MaxRecoveryAttempts, still complete.
func TestRateLimitedTurnWaitsAndCompletes(t *testing.T) {
	e := newEnv(t)
	lim, err := modellimit.New(modellimit.Config{Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	tenant := lim.Tenant("t1", 1)
	limited := func(ra time.Duration) script {
		return failWith(&llm.Error{Provider: "fake", Retryable: true, Status: 429, Code: "rate_limit_exceeded", RetryAfter: ra, Err: llm.ErrRateLimited})
	}
	p := &fake{scripts: []script{limited(2 * time.Second), limited(0), limited(0), passLocal()}}
	h := e.host(t, "a1", p, func(c *chat.Config) {
		c.Limiter = tenant
		c.MaxRecoveryAttempts = 2
	})
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	// While the limiter holds it, the turn says so in its status.
	var seen *chat.ModelWait
	waitfor.True(t, "the status to show the turn waiting for the rate limit", func() bool {
		st, err := h.a.Status()
		if err != nil {
			t.Fatal(err)
		}
		if w := st.ModelWait; w != nil && w.RateLimited && w.RetryAfter == 2*time.Second {
			if st.ActiveTurn == nil {
				t.Fatalf("status %+v: waiting without an active turn", st)
			}
			seen = w
		}
		return seen != nil
	})
	if seen.Model != "fake/fake" {
		t.Fatalf("status never showed the turn waiting for the rate limit: %+v", seen)
	}
	h.r.Wait()
	msgs := settled(t, e, "a1")
	if len(msgs) != 2 || msgs[1].Text() != answer("hello") {
		t.Fatalf("messages = %+v", msgs)
	}
	if lt := lastTurn(t, e, "a1"); lt.Status != chat.TurnCompleted {
		t.Fatalf("turn %+v, want completed", lt)
	}
	// The limiter's record: a pause of 2 s from the first answer, and the
	// next call let through only after it.
	ps := lim.Pauses()
	if len(ps) != 3 || ps[0].RetryAfter != 2*time.Second || ps[0].Until.Sub(ps[0].At) != 2*time.Second {
		t.Fatalf("pauses %+v, want 3, the first for the Retry-After of 2s", ps)
	}
	s := tenant.Stats()
	if s.Granted != 4 || s.Throttled != 3 || s.Paused < 1 || s.LastGrant.Before(ps[0].Until) {
		t.Fatalf("tenant stats %+v, want 4 calls, 3 throttled, the last after the pause (until %v)", s, ps[0].Until)
	}
}

// Two tenants of weights 1 and 3, each with agents chatting in a loop,
// share a limit of 10 calls a second of a local model that answers 429
// past 10 calls a second itself: while both wait, their turns' model
// calls are let through 1:3, within 10% (counted, not timed).
func TestTenantsShareModelLimitByWeight(t *testing.T) {
	if testing.Short() {
		t.Skip("runs turns for about 10 s")
	}
	e := newEnv(t)
	lim, err := modellimit.New(modellimit.Config{Calls: modellimit.Rate{N: 10, Per: time.Second}, Burst: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	local := llm.NewLocal(llm.LocalConfig{Rate: -1, Limit: llm.LocalLimit{Calls: 10, Per: time.Second}})
	light, heavy := lim.Tenant("light", 1), lim.Tenant("heavy", 3)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	heavyCtx, stopHeavy := context.WithCancel(ctx)
	chatter := func(ctx context.Context, tn *modellimit.Tenant, agents int) {
		for i := range agents {
			h := e.host(t, fmt.Sprintf("%s-%d", tn.Name(), i), local, func(c *chat.Config) { c.Limiter = tn })
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ctx.Err() == nil; n++ {
					if _, err := h.a.Send(ctx, chat.SendRequest{Text: fmt.Sprintf("hello %d", n)}); err != nil {
						return
					}
					h.r.Wait()
				}
			}()
		}
	}
	chatter(ctx, light, 4)
	chatter(heavyCtx, heavy, 10)
	total := func() int64 { return light.Stats().Granted + heavy.Stats().Granted }
	// The bound is for the load's 180 calls at a shared rate limit.
	const bound = 2 * time.Minute
	until := func(n int64) {
		waitfor.Within(t, bound, func() error {
			if got := total(); got < n {
				return fmt.Errorf("%d calls granted, have %d", n, got)
			}
			return nil
		})
	}
	until(20) // every agent is chatting
	l0, h0 := light.Stats().Granted, heavy.Stats().Granted
	until(l0 + h0 + 80)
	l1, h1 := light.Stats().Granted, heavy.Stats().Granted
	lg, hg := l1-l0, h1-h0
	ratio := float64(hg) / float64(lg)
	t.Logf("light %d, heavy %d calls: ratio %.3f; 429s: %d (light %d, heavy %d)", lg, hg, ratio,
		len(lim.Pauses()), light.Stats().Throttled, heavy.Stats().Throttled)
	if math.Abs(ratio-3)/3 > 0.10 {
		t.Fatalf("heavy:light = %d:%d = %.3f, want 3 within 10%%", hg, lg, ratio)
	}
	// The heavy tenant goes idle (its turns in flight end): the light one
	// gets every call of the limit, not its quarter.
	stopHeavy()
	waitfor.True(t, "heavy's calls to stop waiting", func() bool { return heavy.Stats().Waiting == 0 })
	l2, h2 := light.Stats().Granted, heavy.Stats().Granted
	until(l2 + h2 + 30)
	if got, hgot := light.Stats().Granted-l2, heavy.Stats().Granted-h2; got < 29 {
		t.Fatalf("with heavy idle, light got %d of the next %d calls, want them all", got, got+hgot)
	}
}
