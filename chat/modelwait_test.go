package chat_test

import (
	"testing"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
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
	deadline := time.Now().Add(10 * time.Second)
	for seen == nil && time.Now().Before(deadline) {
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
		time.Sleep(5 * time.Millisecond)
	}
	if seen == nil || seen.Model != "fake/" {
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
