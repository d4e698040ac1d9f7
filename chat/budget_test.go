package chat_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/cost"
	"github.com/forever-agents/forever/chat/llm"
)

// localPrice is the local model's default price.
var localPrice = cost.Default()["local"]["*"]

func priced(opts ...func(*chat.Config)) func(*chat.Config) {
	return func(c *chat.Config) {
		p := localPrice
		c.Price = &p
		for _, o := range opts {
			o(c)
		}
	}
}

// TestBudgetRefusesPastHardLimit: usage carries its cost; the budget's
// spend is the sum of the usage.recorded events of the period; once it
// reaches the token limit a new turn is refused with 402 until the reset.
func TestBudgetRefusesPastHardLimit(t *testing.T) {
	e := newEnv(t)
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), priced())
	ctx := t.Context()
	first, err := h.a.Send(ctx, chat.SendRequest{Text: "hello there", RequestID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	settled(t, e, "a1")
	u, err := h.a.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := u.Cost, localPrice.Of(u.Input, u.Output, 0); got != want || got == 0 {
		t.Fatalf("usage cost = %s, want %s (nonzero)", got, want)
	}
	tokens := u.Input + u.Output
	soft := 1.0
	st, err := h.a.SetBudget(ctx, chat.BudgetUpdate{Tokens: &tokens, Soft: &soft})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.Spent, (chat.BudgetSpend{Tokens: tokens, Cost: u.Cost}); got != want {
		t.Fatalf("spent = %+v, want the usage %+v", got, want)
	}
	if got, want := st.Period, "24h"; got != want {
		t.Fatalf("period = %q, want %q", got, want)
	}
	if st.Exceeded != "tokens" || !st.ResetsAt.After(st.PeriodStart) {
		t.Fatalf("budget = %+v, want tokens exceeded", st)
	}
	err = h.a.BudgetRefusal(t.Context(), "r2", "")
	var be *chat.BudgetError
	if !errors.As(err, &be) || be.StatusCode() != http.StatusPaymentRequired || be.RetryAfter() <= 0 {
		t.Fatalf("refusal = %v, want a 402 BudgetError", err)
	}
	t.Log(err)
	// The first chat sent again is no new turn: it is let through, and
	// Send answers it with its turn.
	if err := h.a.BudgetRefusal(t.Context(), "r1", ""); err != nil {
		t.Fatalf("the first chat sent again is refused: %v", err)
	}
	if again, err := h.a.Send(ctx, chat.SendRequest{Text: "hello there", RequestID: "r1"}); err != nil || again.StreamID != first.StreamID {
		t.Fatalf("the first chat sent again = %+v, %v; want its turn %+v", again, err, first)
	}

	// A higher limit (only tokens changed: the rest is kept) lets turns in.
	more := tokens + 1
	st, err = h.a.SetBudget(ctx, chat.BudgetUpdate{Tokens: &more})
	if err != nil || st.Exceeded != "" || st.Soft != 1 {
		t.Fatalf("budget = %+v, %v; want not exceeded, soft kept", st, err)
	}
	if err := h.a.BudgetRefusal(t.Context(), "r3", ""); err != nil {
		t.Fatal(err)
	}
	// A cost limit binds as well.
	c := u.Cost
	if st, err = h.a.SetBudget(ctx, chat.BudgetUpdate{Cost: &c}); err != nil || st.Exceeded != "cost" {
		t.Fatalf("budget = %+v, %v; want cost exceeded", st, err)
	}

	for _, bad := range []chat.BudgetUpdate{{Tokens: ptr(int64(-1))}, {Period: ptr("1s")}, {Period: ptr("day")}, {Soft: ptr(1.5)}} {
		if _, err := h.a.SetBudget(ctx, bad); !errors.Is(err, chat.ErrInvalidBudget) {
			t.Errorf("SetBudget(%+v) = %v, want ErrInvalidBudget", bad, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestBudgetStopsRunawayTurn: a turn calling tools step after step stops
// before the first model call past the limit (within one model call of
// it): an error chunk, turn.failed with code 402, and the usage of the
// calls it made recorded, so the spend stays the sum of usage.
func TestBudgetStopsRunawayTurn(t *testing.T) {
	e := newEnv(t)
	fx := newSideEffects()
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), priced(withTools(t, fx.tool(t, "safe", chat.Idempotent), fx.tool(t, "risky", chat.Unsafe))))
	ctx := t.Context()
	one := int64(1)
	if _, err := h.a.SetBudget(ctx, chat.BudgetUpdate{Tokens: &one}); err != nil {
		t.Fatal(err)
	}
	turn, err := h.a.Send(ctx, chat.SendRequest{Text: twoTools})
	if err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	settled(t, e, "a1")
	tr := lastTurn(t, e, "a1")
	if tr.Status != chat.TurnFailed || tr.ErrorCode != http.StatusPaymentRequired {
		t.Fatalf("turn = %s code %d (%s), want failed with 402", tr.Status, tr.ErrorCode, tr.Error)
	}
	cs, _ := streamOf(t, e.lg, "a1", turn.StreamID)
	if count(cs, chunk.Error) != 1 {
		t.Fatalf("stream has %d error chunks, want 1", count(cs, chunk.Error))
	}
	fx.mu.Lock()
	ran := len(fx.started)
	fx.mu.Unlock()
	if got := ran; got != 1 {
		t.Fatalf("%d tools ran, want 1: the turn stops before its second model call", got)
	}
	u, err := h.a.Usage()
	if err != nil {
		t.Fatal(err)
	}
	st, err := h.a.Budget(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if u.Input+u.Output == 0 || st.Spent.Tokens != u.Input+u.Output || st.Spent.Cost != u.Cost {
		t.Fatalf("spent %+v, usage %+v: want equal and nonzero", st.Spent, u)
	}
	if err := h.a.BudgetRefusal(t.Context(), "", ""); err == nil {
		t.Fatal("a new turn is let in past the limit")
	}
}

// TestBudgetExactAcrossCrash: a turn killed between a model call and the
// next one is recovered by a new incarnation, whose check before that next
// call counts the calls made before the crash: the turn fails with 402
// and the spend is the usage recorded once, as without the crash.
func TestBudgetExactAcrossCrash(t *testing.T) {
	run := func(t *testing.T, crash bool) (chat.Usage, chat.BudgetStatus) {
		e := newEnv(t)
		local := llm.NewLocal(llm.LocalConfig{Rate: -1})
		fx := newSideEffects()
		opt := priced(withTools(t, fx.tool(t, "safe", chat.Idempotent), fx.tool(t, "risky", chat.Unsafe)))
		h := e.host(t, "a1", local, opt)
		one := int64(1)
		if _, err := h.a.SetBudget(t.Context(), chat.BudgetUpdate{Tokens: &one}); err != nil {
			t.Fatal(err)
		}
		reached := make(chan struct{}, 1)
		if crash {
			chat.StopAt(h.a, func(ctx context.Context, point string) error {
				if point != "step-done" {
					return nil
				}
				reached <- struct{}{}
				<-ctx.Done()
				return ctx.Err()
			})
		}
		if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: twoTools}); err != nil {
			t.Fatal(err)
		}
		if crash {
			wait(t, reached)
			h.r.Close()
			h = recoverHost(t, e, "a1", local, opt)
		}
		h.r.Wait()
		settled(t, e, "a1")
		if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnFailed || tr.ErrorCode != http.StatusPaymentRequired {
			t.Fatalf("turn = %s code %d (%s), want failed with 402", tr.Status, tr.ErrorCode, tr.Error)
		}
		u, err := h.a.Usage()
		if err != nil {
			t.Fatal(err)
		}
		st, err := h.a.Budget(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return u, st
	}
	wantU, wantSt := run(t, false)
	gotU, gotSt := run(t, true)
	if gotU != wantU || gotU.Turns != 1 {
		t.Fatalf("usage after a crash = %+v, without = %+v", gotU, wantU)
	}
	if gotSt.Spent != wantSt.Spent || gotSt.Spent.Tokens != gotU.Input+gotU.Output || gotSt.Spent.Cost != gotU.Cost {
		t.Fatalf("spent after a crash = %+v, without = %+v, usage %+v", gotSt.Spent, wantSt.Spent, gotU)
	}
}
