package chat_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
)

// manualClock is a chat.Clock whose Now moves only when the test says.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// crashAgain recovers the agent's turn on a new incarnation whose provider
// streams k more words and stalls, then kills it.
func crashAgain(t *testing.T, e *env, agent string, k int, opt func(*chat.Config)) (called bool) {
	t.Helper()
	reached := make(chan struct{}, 1)
	p := &fake{scripts: []script{cutAfter(k, reached)}}
	h := e.host(t, agent, p, opt)
	if err := h.r.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	go func() { h.r.Wait(); close(ended) }()
	select {
	case <-reached: // the provider streamed and stalls
	case <-ended: // the turn ended without stalling
	case <-time.After(20 * time.Second):
		t.Fatal("timed out")
	}
	h.r.Close()
	return p.Calls() > 0
}

// A turn that makes progress between crashes is never abandoned, however
// many crashes there are: progress resets the chat's count and the fiber's
// (whose cap, 5 by default, used to count every recovery of the turn).
func TestProgressResetsBothCaps(t *testing.T) {
	e := newEnv(t)
	const prompt = "tell me a long story"
	turn := crash(t, e, "a1", prompt, 2)
	for i := range 2 * fiberDefaultMax {
		if !crashAgain(t, e, "a1", 2, nil) {
			t.Fatalf("recovery %d did not call the provider", i+1)
		}
		if tr := lastTurn(t, e, "a1"); !tr.Active() {
			t.Fatalf("after recovery %d the turn ended: %+v", i+1, tr)
		}
	}
	recoverHost(t, e, "a1", &fake{scripts: []script{passLocal()}}, nil)
	if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnCompleted {
		t.Fatalf("turn = %+v", tr)
	}
	if _, text := streamOf(t, e.lg, "a1", turn.StreamID); text != answer(prompt) {
		t.Fatalf("streamed %q, want %q", text, answer(prompt))
	}
}

const fiberDefaultMax = 5

// Recoveries without progress within AttemptWindow of the last counted one
// are that attempt: a burst of restarts costs one attempt; spaced out, each
// counts, and the budget still runs out.
func TestRecoveriesInWindowCountOnce(t *testing.T) {
	e := newEnv(t)
	clock := &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	const max = 2
	opt := func(c *chat.Config) { c.MaxRecoveryAttempts, c.Clock = max, clock }
	turn := crash(t, e, "a1", "tell me a story", 2)
	// Attempt 1 (it made progress before the crash), then a burst.
	for i := range 2 * fiberDefaultMax {
		if !crashAgain(t, e, "a1", 0, opt) {
			t.Fatalf("burst recovery %d: provider not called, the burst was counted", i+1)
		}
	}
	clock.Advance(chat.DefaultAttemptWindow + time.Second)
	if !crashAgain(t, e, "a1", 0, opt) { // attempt 2
		t.Fatal("attempt 2: provider not called")
	}
	clock.Advance(chat.DefaultAttemptWindow + time.Second)
	if crashAgain(t, e, "a1", 0, opt) { // attempt 3 > max
		t.Fatal("attempt 3: provider called after the budget was spent")
	}
	tr := lastTurn(t, e, "a1")
	if tr.Status != chat.TurnFailed || !strings.Contains(tr.Error, "recovery attempts exhausted") {
		t.Fatalf("turn = %+v", tr)
	}
	if info := streamInfo(t, e, "a1", turn.StreamID); info.Status != chunk.StatusError {
		t.Fatalf("stream = %+v", info)
	}
}
