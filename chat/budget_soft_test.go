package chat_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
)

// softSetup runs a first turn without a budget (U tokens) and sets a
// budget of 4U tokens with soft 0.25: the next turn's first model call
// finds the soft limit (U) reached, the hard one (4U) not.
func softSetup(t *testing.T, h *host, e *env) {
	t.Helper()
	ctx := t.Context()
	if _, err := h.a.Send(ctx, chat.SendRequest{Text: "hello there"}); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	settled(t, e, "a1")
	u, err := h.a.Usage()
	if err != nil {
		t.Fatal(err)
	}
	tokens, soft := 4*(u.Input+u.Output), 0.25
	st, err := h.a.SetBudget(ctx, chat.BudgetUpdate{Tokens: &tokens, Soft: &soft})
	if err != nil || !st.SoftEnforced || st.Exceeded != "" {
		t.Fatalf("budget = %+v, %v; want soft enforced, not exceeded", st, err)
	}
}

// parkedAt signals parked each time the turn's park is durable; with
// crash set it blocks there, as a process killed between the check and
// the model call.
func parkedAt(h *host, crash bool) chan struct{} {
	parked := make(chan struct{}, 4)
	chat.StopAt(h.a, func(ctx context.Context, point string) error {
		if point != "budget-parked" {
			return nil
		}
		parked <- struct{}{}
		if crash {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	return parked
}

func eventsOf(t *testing.T, e *env, typ string) []eventlog.Event {
	t.Helper()
	evs, err := e.lg.Read(t.Context(), eventlog.Filter{Agent: "a1"}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []eventlog.Event
	for _, ev := range evs {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

// TestBudgetSoftParks: at the soft limit the turn parks before its model
// call as a pending approval (kind budget) and a data-budget part; the
// approve answer continues the same turn, which completes; the agent's
// turns do not park again in the period, and the spend is the sum of
// usage. With crash set, the process dies right after the park is
// durable: the recovered turn waits on the same park (no second park, no
// second usage).
func TestBudgetSoftParks(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "crash"}[crash], func(t *testing.T) {
			e := newEnv(t)
			local := llm.NewLocal(llm.LocalConfig{Rate: -1})
			var mu sync.Mutex
			var notices []chat.BudgetNotice
			opt := priced(func(c *chat.Config) {
				c.OnBudget = func(_ context.Context, n chat.BudgetNotice) {
					mu.Lock()
					notices = append(notices, n)
					mu.Unlock()
				}
			})
			h := e.host(t, "a1", local, opt)
			ctx := t.Context()
			softSetup(t, h, e)
			parked := parkedAt(h, crash)
			turn, err := h.a.Send(ctx, chat.SendRequest{Text: "hello again"})
			if err != nil {
				t.Fatal(err)
			}
			wait(t, parked)
			if crash {
				h.r.Close()
				h = e.host(t, "a1", local, opt)
				parked = parkedAt(h, false)
				if err := h.r.Recover(ctx); err != nil {
					t.Fatal(err)
				}
				wait(t, parked)
			}
			pending, err := e.store.PendingApprovals("a1")
			if err != nil {
				t.Fatal(err)
			}
			if len(pending) != 1 || pending[0].Kind != chat.ApprovalKindBudget || !strings.HasPrefix(pending[0].ApprovalID, chat.BudgetApprovalPrefix) ||
				pending[0].ToolCallID != pending[0].ApprovalID ||
				pending[0].RequestID != turn.RequestID || !strings.Contains(pending[0].Reason, "token budget") {
				t.Fatalf("pending approvals = %+v, want the budget park of turn %s", pending, turn.RequestID)
			}
			t.Log(pending[0].Reason)
			if _, err := h.a.Answer(ctx, []chat.ToolAnswer{{ApprovalID: "budget-nope", Approved: ptr(true)}}, nil); !errors.Is(err, chat.ErrUnknownToolCall) {
				t.Fatalf("answer to an unknown park = %v, want ErrUnknownToolCall", err)
			}
			got, err := h.a.Answer(ctx, []chat.ToolAnswer{{ApprovalID: pending[0].ApprovalID, Approved: ptr(true)}}, nil)
			if err != nil || got.RequestID != turn.RequestID || got.StreamID != turn.StreamID {
				t.Fatalf("approve = %+v, %v; want the parked turn %+v", got, err, turn)
			}
			if _, err := h.a.Answer(ctx, []chat.ToolAnswer{{ApprovalID: pending[0].ApprovalID, Approved: ptr(true)}}, nil); !errors.Is(err, chat.ErrAlreadyAnswered) {
				t.Fatalf("second approve = %v, want ErrAlreadyAnswered", err)
			}
			h.r.Wait()
			settled(t, e, "a1")
			if tr := lastTurn(t, e, "a1"); tr.RequestID != turn.RequestID || tr.Status != chat.TurnCompleted {
				t.Fatalf("turn = %s %s (%s), want %s completed", tr.RequestID, tr.Status, tr.Error, turn.RequestID)
			}
			cs, _ := streamOf(t, e.lg, "a1", turn.StreamID)
			var statuses []string
			for _, c := range cs {
				if c.Type == chat.PartBudget {
					var p chat.BudgetPark
					if err := json.Unmarshal(c.Data, &p); err != nil {
						t.Fatal(err)
					}
					statuses = append(statuses, p.Status)
				}
			}
			if strings.Join(statuses, ",") != "waiting,approved" || count(cs, chunk.Finish) != 1 {
				t.Fatalf("stream's budget parts = %v, finish chunks %d; want waiting,approved and one finish", statuses, count(cs, chunk.Finish))
			}
			if pending, _ := e.store.PendingApprovals("a1"); len(pending) != 0 {
				t.Fatalf("pending approvals after the approval = %+v", pending)
			}
			if n := len(eventsOf(t, e, chat.EventBudgetParked)); n != 1 {
				t.Fatalf("%d budget.parked events, want 1", n)
			}
			// Approved for the period: the next turn does not park.
			if _, err := h.a.Send(ctx, chat.SendRequest{Text: "and again"}); err != nil {
				t.Fatal(err)
			}
			h.r.Wait()
			settled(t, e, "a1")
			if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnCompleted {
				t.Fatalf("turn after the approval = %s (%s), want completed", tr.Status, tr.Error)
			}
			u, err := h.a.Usage()
			if err != nil {
				t.Fatal(err)
			}
			st, err := h.a.Budget(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if u.Turns != 3 || st.Spent.Tokens != u.Input+u.Output || st.Spent.Cost != u.Cost {
				t.Fatalf("spent %+v, usage %+v: want equal, 3 turns", st.Spent, u)
			}
			if !crash {
				mu.Lock()
				defer mu.Unlock()
				var kinds []string
				for _, n := range notices {
					kinds = append(kinds, n.Kind)
				}
				if strings.Join(kinds, ",") != "budget.parked,budget.approved" {
					t.Fatalf("notices = %v, want parked then approved", kinds)
				}
			}
		})
	}
}

// TestBudgetSoftDenied: a denied park ends the turn cleanly: its usage
// recorded, an error chunk naming the denial, turn.failed with 402.
func TestBudgetSoftDenied(t *testing.T) {
	e := newEnv(t)
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), priced())
	ctx := t.Context()
	softSetup(t, h, e)
	parked := parkedAt(h, false)
	turn, err := h.a.Send(ctx, chat.SendRequest{Text: "hello again"})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, parked)
	pending, err := e.store.PendingApprovals("a1")
	if err != nil || len(pending) != 1 {
		t.Fatalf("pending = %+v, %v", pending, err)
	}
	// The HTTP route names the park where a tool call id goes.
	if _, err := h.a.Answer(ctx, []chat.ToolAnswer{{CallID: pending[0].ApprovalID, Approved: ptr(false), Reason: "not this month"}}, nil); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	settled(t, e, "a1")
	tr := lastTurn(t, e, "a1")
	if tr.RequestID != turn.RequestID || tr.Status != chat.TurnFailed || tr.ErrorCode != http.StatusPaymentRequired ||
		!strings.Contains(tr.Error, "denied") || !strings.Contains(tr.Error, "not this month") {
		t.Fatalf("turn = %s code %d (%s), want failed with 402 naming the denial", tr.Status, tr.ErrorCode, tr.Error)
	}
	t.Log(tr.Error)
	cs, _ := streamOf(t, e.lg, "a1", turn.StreamID)
	if count(cs, chunk.Error) != 1 {
		t.Fatalf("stream has %d error chunks, want 1", count(cs, chunk.Error))
	}
	u, err := h.a.Usage()
	if err != nil {
		t.Fatal(err)
	}
	st, err := h.a.Budget(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Spent.Tokens != u.Input+u.Output || st.Spent.Cost != u.Cost {
		t.Fatalf("spent %+v, usage %+v: want equal", st.Spent, u)
	}
}

// TestBudgetSoftReleasedByRaise: a budget raised past the spend lets a
// parked turn go without an answer, and the period stays open to parks.
func TestBudgetSoftReleasedByRaise(t *testing.T) {
	e := newEnv(t)
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), priced())
	ctx := t.Context()
	softSetup(t, h, e)
	parked := parkedAt(h, false)
	turn, err := h.a.Send(ctx, chat.SendRequest{Text: "hello again"})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, parked)
	more := int64(1_000_000)
	if _, err := h.a.SetBudget(ctx, chat.BudgetUpdate{Tokens: &more}); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	settled(t, e, "a1")
	if tr := lastTurn(t, e, "a1"); tr.RequestID != turn.RequestID || tr.Status != chat.TurnCompleted {
		t.Fatalf("turn = %s %s (%s), want %s completed", tr.RequestID, tr.Status, tr.Error, turn.RequestID)
	}
	if pending, _ := e.store.PendingApprovals("a1"); len(pending) != 0 {
		t.Fatalf("pending approvals after the raise = %+v", pending)
	}
	// The period stays open to parks: lowered again, the next turn parks.
	st, err := h.a.Budget(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	low := 4 * st.Spent.Tokens
	if _, err := h.a.SetBudget(ctx, chat.BudgetUpdate{Tokens: &low}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.a.Send(ctx, chat.SendRequest{Text: "once more"}); err != nil {
		t.Fatal(err)
	}
	wait(t, parked)
	pending, err := e.store.PendingApprovals("a1")
	if err != nil || len(pending) != 1 {
		t.Fatalf("pending = %+v, %v; want the second park", pending, err)
	}
	if _, err := h.a.Answer(ctx, []chat.ToolAnswer{{ApprovalID: pending[0].ApprovalID, Approved: ptr(false)}}, nil); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	settled(t, e, "a1")
	if got := len(eventsOf(t, e, chat.EventBudgetParked)); got != 2 {
		t.Fatalf("%d parks, want 2", got)
	}
}

// TestBudgetSoftRaisedBeforeWait: a budget raised after a turn parked but
// before the turn began to wait for its decision (no one to wake yet) still
// lets the turn go on: the turn reads the limits once it waits. (The raise
// in TestBudgetSoftReleasedByRaise fell in that window once and the turn
// waited for the period's reset.)
func TestBudgetSoftRaisedBeforeWait(t *testing.T) {
	e := newEnv(t)
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), priced())
	ctx := t.Context()
	softSetup(t, h, e)
	parked, goOn := make(chan struct{}, 1), make(chan struct{})
	chat.StopAt(h.a, func(ctx context.Context, point string) error {
		if point == "budget-parked" {
			parked <- struct{}{}
			<-goOn
		}
		return nil
	})
	turn, err := h.a.Send(ctx, chat.SendRequest{Text: "hello again"})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, parked)
	more := int64(1_000_000)
	if _, err := h.a.SetBudget(ctx, chat.BudgetUpdate{Tokens: &more}); err != nil {
		t.Fatal(err)
	}
	close(goOn)
	done := make(chan struct{})
	go func() { h.r.Wait(); close(done) }()
	wait(t, done)
	settled(t, e, "a1")
	if tr := lastTurn(t, e, "a1"); tr.RequestID != turn.RequestID || tr.Status != chat.TurnCompleted {
		t.Fatalf("turn = %s %s (%s), want %s completed", tr.RequestID, tr.Status, tr.Error, turn.RequestID)
	}
}
