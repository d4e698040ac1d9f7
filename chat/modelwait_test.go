package chat_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/forever-agents/forever/modellimit"
	"github.com/forever-agents/forever/modellimit/modellimittest"
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
// share a limit of 10 calls a second: while both wait, their turns' model
// calls are let through 1:3, within 10%, and the limit is used whole;
// once the heavy tenant is idle, the light one gets every call of the
// limit, not its quarter. The limiter's clock is the test's: it moves a
// second at a time once every agent's turn waits for its model call, so
// the count is of the limiter's decisions, whatever the machine's speed
// (on real time a loaded machine left a tenant's queue empty between
// turns, and the ratio came out 2.3-2.6). The provider's 429s are
// TestRateLimitedTurnWaitsAndCompletes'.
func TestTenantsShareModelLimitByWeight(t *testing.T) {
	e := newEnv(t)
	clk := modellimittest.NewClock()
	lim, err := modellimit.New(modellimit.Config{Calls: modellimit.Rate{N: 10, Per: time.Second}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	local := llm.NewLocal(llm.LocalConfig{Rate: -1})
	light, heavy := lim.Tenant("light", 1), lim.Tenant("heavy", 3)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() {
		// The turns in flight wait for the limiter: its clock goes on
		// until every chatter has ended.
		cancel()
		ended := make(chan struct{})
		go func() { wg.Wait(); close(ended) }()
		for {
			select {
			case <-ended:
				return
			case <-time.After(10 * time.Millisecond): // not a synchronisation: the limiter's clock ticking
				clk.Advance(time.Second)
			}
		}
	}()
	heavyCtx, stopHeavy := context.WithCancel(ctx)
	var lightChatting, heavyChatting atomic.Int64
	chatter := func(ctx context.Context, tn *modellimit.Tenant, agents int, chatting *atomic.Int64) {
		for i := range agents {
			h := e.host(t, fmt.Sprintf("%s-%d", tn.Name(), i), local, func(c *chat.Config) { c.Limiter = tn })
			wg.Add(1)
			chatting.Add(1)
			go func() {
				defer wg.Done()
				defer chatting.Add(-1)
				for n := 0; ctx.Err() == nil; n++ {
					if _, err := h.a.Send(ctx, chat.SendRequest{Text: fmt.Sprintf("hello %d", n)}); err != nil {
						return
					}
					h.r.Wait()
				}
			}()
		}
	}
	chatter(ctx, light, 4, &lightChatting)
	chatter(heavyCtx, heavy, 10, &heavyChatting)
	granted := func() int64 { return light.Stats().Granted + heavy.Stats().Granted }
	// settle waits until every chatter's turn waits for its model call
	// (its timer taken), with want calls granted (-1: any number).
	settle := func(want int64) {
		t.Helper()
		waitfor.NoError(t, func() error {
			lw, hw := light.Stats().Waiting, heavy.Stats().Waiting
			if lw != lightChatting.Load() || hw != heavyChatting.Load() || clk.Pending() < int(lw+hw) {
				return fmt.Errorf("light %d and heavy %d calls waiting (%d timers), want %d and %d", lw, hw, clk.Pending(), lightChatting.Load(), heavyChatting.Load())
			}
			if got := granted(); want >= 0 && got != want {
				return fmt.Errorf("%d calls granted, want %d", got, want)
			}
			return nil
		})
	}
	// A quiet model's burst (a second of calls) goes at once, to whoever
	// asks first.
	settle(10)
	l0, h0 := light.Stats().Granted, heavy.Stats().Granted
	const seconds = 8
	for i := int64(1); i <= seconds; i++ {
		clk.Advance(time.Second)
		settle(l0 + h0 + 10*i)
	}
	lg, hg := light.Stats().Granted-l0, heavy.Stats().Granted-h0
	ratio := float64(hg) / float64(lg)
	t.Logf("light %d, heavy %d calls in %d s of the limiter's clock: ratio %.3f", lg, hg, seconds, ratio)
	if math.Abs(ratio-3)/3 > 0.10 {
		t.Fatalf("heavy:light = %d:%d = %.3f, want 3 within 10%%", hg, lg, ratio)
	}
	// The heavy tenant goes idle: its turns in flight end (they get their
	// calls, in turn), and it sends no more.
	stopHeavy()
	for heavyChatting.Load() > 0 {
		clk.Advance(time.Second)
		settle(-1)
	}
	l2, h2 := light.Stats().Granted, heavy.Stats().Granted
	for i := int64(1); i <= 3; i++ {
		clk.Advance(time.Second)
		settle(l2 + h2 + 10*i)
	}
	if got, hgot := light.Stats().Granted-l2, heavy.Stats().Granted-h2; got != 30 || hgot != 0 {
		t.Fatalf("with heavy idle, light got %d and heavy %d of 3 s of the limit (30 calls), want them all to light", got, hgot)
	}
}
