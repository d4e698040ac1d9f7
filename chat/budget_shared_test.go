package chat_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// sharedBudgets is the test's chat.SharedBudgets: a user budget for each
// user of users (agent -> user), and a tenant budget, as agentd gives
// them (the tenant's record and the agents view), over the env's views.
type sharedBudgets struct {
	e *env

	mu     sync.Mutex
	users  map[string]string
	user   chat.BudgetLimits // every user's
	tenant chat.BudgetLimits
}

func (s *sharedBudgets) set(user, tenant chat.BudgetLimits) {
	s.mu.Lock()
	s.user, s.tenant = user, tenant
	s.mu.Unlock()
}

func (s *sharedBudgets) BudgetsOf(ctx context.Context, agent string) ([]chat.SharedBudget, error) {
	last, err := s.e.lg.LastSeq(ctx, eventlog.Filter{})
	if err != nil {
		return nil, err
	}
	if err := s.e.store.WaitFor(ctx, last); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []chat.SharedBudget
	if u := s.users[agent]; u != "" && s.user.Limited() {
		b := chat.SharedBudget{Scope: chat.ScopeUser, Name: u, Limits: s.user}
		for a, au := range s.users {
			if au == u {
				b.Agents = append(b.Agents, a)
			}
		}
		out = append(out, b)
	}
	if s.tenant.Limited() {
		out = append(out, chat.SharedBudget{Scope: chat.ScopeTenant, Name: "acme", Limits: s.tenant})
	}
	return out, nil
}

func withShared(s *sharedBudgets) func(*chat.Config) {
	return priced(func(c *chat.Config) { c.SharedBudgets = s })
}

// spentTokens runs a turn of h and returns the tokens it spent.
func spentTokens(t *testing.T, e *env, h *host, agent, req string) int64 {
	t.Helper()
	before, err := h.a.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "hello there", RequestID: req}); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	settled(t, e, agent)
	after, err := h.a.Usage()
	if err != nil {
		t.Fatal(err)
	}
	return after.Input + after.Output - before.Input - before.Output
}

// TestUserBudgetSharedByAgents: two agents of one user share the user's
// budget: the second agent's turns count with the first's, and once their
// sum passes the limit both are refused with 402 naming the user's
// budget, while another user's agent is not; a turn let in past the limit
// ends with 402 before its model call. The budget read shows the user's
// spend equal to the sum of both agents' usage.
func TestUserBudgetSharedByAgents(t *testing.T) {
	e := newEnv(t)
	sb := &sharedBudgets{e: e, users: map[string]string{"a1": "alice", "a2": "alice", "b1": "bob"}}
	local := llm.NewLocal(llm.LocalConfig{Rate: -1})
	a1 := e.host(t, "a1", local, withShared(sb))
	a2 := e.host(t, "a2", local, withShared(sb))
	b1 := e.host(t, "b1", local, withShared(sb))
	ctx := t.Context()

	t1 := spentTokens(t, e, a1, "a1", "r1")
	sb.set(chat.BudgetLimits{Tokens: t1 + 1, Period: "24h", Soft: 1}, chat.BudgetLimits{})
	// Alone, a1 is below alice's limit: a2 is let in.
	if err := a2.a.BudgetRefusal(ctx, "r2", ""); err != nil {
		t.Fatalf("a2 refused below the user's limit: %v", err)
	}
	t2 := spentTokens(t, e, a2, "a2", "r2")

	for _, h := range []*host{a1, a2} {
		err := h.a.BudgetRefusal(ctx, "r3", "")
		var be *chat.BudgetError
		if !errors.As(err, &be) || be.StatusCode() != http.StatusPaymentRequired || be.Scope != chat.ScopeUser || be.Name != "alice" {
			t.Fatalf("refusal = %v, want a 402 on alice's budget", err)
		}
		if !strings.Contains(err.Error(), "user alice's token budget of") || !strings.Contains(err.Error(), "per 24h") || !strings.Contains(err.Error(), "resets at") {
			t.Fatalf("refusal %q does not name the user's budget, its period and its reset", err)
		}
	}
	if err := b1.a.BudgetRefusal(ctx, "r3", ""); err != nil {
		t.Fatalf("bob's agent refused on alice's budget: %v", err)
	}
	st, err := a1.a.Budget(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Shared) != 1 || st.Shared[0].Scope != chat.ScopeUser || st.Shared[0].Spent.Tokens != t1+t2 || st.Shared[0].Exceeded != "tokens" {
		t.Fatalf("shared = %+v, want alice's with %d+%d tokens spent, exceeded", st.Shared, t1, t2)
	}

	// A turn let in anyway (the check raced another agent's usage) ends
	// before its model call, with 402.
	if _, err := a2.a.Send(ctx, chat.SendRequest{Text: "hello there", RequestID: "r4"}); err != nil {
		t.Fatal(err)
	}
	a2.r.Wait()
	settled(t, e, "a2")
	if tr := lastTurn(t, e, "a2"); tr.Status != chat.TurnFailed || tr.ErrorCode != http.StatusPaymentRequired || !strings.Contains(tr.Error, "user alice's") {
		t.Fatalf("turn = %s code %d (%s), want failed with 402 on alice's budget", tr.Status, tr.ErrorCode, tr.Error)
	}
	if st, err := a2.a.Budget(ctx); err != nil || st.Shared[0].Spent.Tokens != t1+t2 {
		t.Fatalf("shared = %+v, %v: the refused turn spent nothing", st.Shared, err)
	}
}

// TestTenantBudgetCountsEveryAgent: a tenant's budget counts the spend of
// every agent of the log, each once, and refuses every agent past it.
func TestTenantBudgetCountsEveryAgent(t *testing.T) {
	e := newEnv(t)
	sb := &sharedBudgets{e: e, users: map[string]string{}}
	local := llm.NewLocal(llm.LocalConfig{Rate: -1})
	a1 := e.host(t, "a1", local, withShared(sb))
	a2 := e.host(t, "a2", local, withShared(sb))
	ctx := t.Context()
	t1 := spentTokens(t, e, a1, "a1", "r1")
	t2 := spentTokens(t, e, a2, "a2", "r2")
	sb.set(chat.BudgetLimits{}, chat.BudgetLimits{Tokens: t1 + t2 + 1, Period: "1h", Soft: 1})
	st, err := a1.a.Budget(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Shared) != 1 || st.Shared[0].Scope != chat.ScopeTenant || st.Shared[0].Spent.Tokens != t1+t2 || st.Shared[0].Exceeded != "" {
		t.Fatalf("shared = %+v, want the tenant's with %d tokens spent", st.Shared, t1+t2)
	}
	t3 := spentTokens(t, e, a1, "a1", "r3")
	err = a2.a.BudgetRefusal(ctx, "r4", "")
	var be *chat.BudgetError
	if !errors.As(err, &be) || be.Scope != chat.ScopeTenant || !strings.Contains(err.Error(), "tenant acme's token budget of") {
		t.Fatalf("refusal = %v, want 402 on the tenant's budget", err)
	}
	if st, err := a2.a.Budget(ctx); err != nil || st.Shared[0].Spent.Tokens != t1+t2+t3 {
		t.Fatalf("shared = %+v, %v; want %d tokens", st.Shared, err, t1+t2+t3)
	}
	// A figure, not a bound: what the check costs (a stream info request,
	// the views' wait, the spend's read).
	const n = 100
	begin := time.Now()
	for range n {
		_ = a1.a.BudgetRefusal(ctx, "", "")
	}
	t.Logf("a check of the tenant's budget: %s", time.Since(begin)/time.Duration(n))
}

// appendUsage appends a usage.recorded of agent at when, with sub tokens
// of sub-agents among its tokens.
func appendUsage(t testing.TB, e *env, agent, req string, when time.Time, tokens, sub int64) {
	t.Helper()
	data := map[string]any{"requestId": req, "input": tokens - sub, "output": 0}
	if sub > 0 {
		data["subagents"] = map[string]any{"input": sub, "output": 0, "calls": 1}
	}
	ev, err := eventlog.NewEvent(agent, chat.EventUsageRecorded, data)
	if err != nil {
		t.Fatal(err)
	}
	ev.Time = when
	if _, err := e.lg.Append(t.Context(), ev); err != nil {
		t.Fatal(err)
	}
}

// TestBudgetSpendAllSkipsOtherPeriods: the tenant's spend counts the rows
// of the period only, of every agent, each agent's own tokens (its
// sub-agents' are on their own rows), whatever the agents' rows before
// the period.
func TestBudgetSpendAllSkipsOtherPeriods(t *testing.T) {
	e := newEnv(t)
	start := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	old, now := start.Add(-time.Hour), start.Add(time.Hour)
	appendUsage(t, e, "a1", "r1", old, 1000, 0)
	appendUsage(t, e, "a1", "r2", now, 10, 0)
	appendUsage(t, e, "a2", "r1", old, 1000, 0) // only before the period
	appendUsage(t, e, "a3", "r1", now, 100, 40) // 40 of its sub-agents'
	appendUsage(t, e, "a3", "r1", now, 100, 40) // the same request again: once
	appendUsage(t, e, "a4", "r1", old, 1000, 0)
	appendUsage(t, e, "a4", "r2", now.Add(time.Minute), 1, 0)
	last, err := e.lg.LastSeq(t.Context(), eventlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.WaitFor(t.Context(), last); err != nil {
		t.Fatal(err)
	}
	sp, err := e.store.BudgetSpendAll(start)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sp.Tokens, int64(10+60+1); got != want {
		t.Fatalf("tenant spend = %d tokens, want %d", got, want)
	}
	if sp, err := e.store.BudgetSpendAll(old.Add(-time.Hour)); err != nil || sp.Tokens != 3000+10+60+1 {
		t.Fatalf("spend over both periods = %+v, %v", sp, err)
	}
}

// TestBudgetSpendAllCost logs what the tenant's spend costs to read at
// two agent counts, rows of several periods each (figures, not bounds:
// the read must not grow with the agents; docs/benchmarks.md). Under
// -race, whose figures mean nothing, it only checks the sum, at the
// smaller count.
func TestBudgetSpendAllCost(t *testing.T) {
	if testing.Short() {
		t.Skip("a measure")
	}
	counts, n := []int{30, 300}, 200
	if raceEnabled {
		counts, n = counts[:1], 5
	}
	for _, agents := range counts {
		const rows = 6
		e := newEnv(t)
		start := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
		for a := range agents {
			for r := range rows {
				when := start.Add(time.Duration(r-rows/2) * time.Hour) // half before the period
				appendUsage(t, e, fmt.Sprintf("agent-%03d", a), fmt.Sprintf("r%d", r), when, 10, 0)
			}
		}
		last, err := e.lg.LastSeq(t.Context(), eventlog.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.store.WaitFor(t.Context(), last); err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		for range n {
			sp, err := e.store.BudgetSpendAll(start)
			if err != nil || sp.Tokens != int64(agents*rows/2*10) {
				t.Fatalf("spend = %+v, %v", sp, err)
			}
		}
		t.Logf("tenant spend over %d agents x %d rows (half in the period): %s a read", agents, rows, time.Since(begin)/time.Duration(n))
	}
}

// TestTenantBudgetSoftParks: at the soft fraction of a tenant's budget a
// turn of another agent parks as the agent budget's parks do, with an
// approval id of the tenant's budget and a reason naming it; approved, it
// completes, and the agent's turns do not park again on that budget in
// the period.
func TestTenantBudgetSoftParks(t *testing.T) {
	e := newEnv(t)
	sb := &sharedBudgets{e: e, users: map[string]string{}}
	local := llm.NewLocal(llm.LocalConfig{Rate: -1})
	a1 := e.host(t, "a1", local, withShared(sb))
	a2 := e.host(t, "a2", local, withShared(sb))
	ctx := t.Context()
	t1 := spentTokens(t, e, a1, "a1", "r1")
	sb.set(chat.BudgetLimits{}, chat.BudgetLimits{Tokens: 4 * t1, Period: "24h", Soft: 0.25})
	parked := parkedAt(a2, false)
	turn, err := a2.a.Send(ctx, chat.SendRequest{Text: "hello there", RequestID: "r2"})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, parked)
	pending, err := e.store.PendingApprovals("a2")
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 1 || pending[0].Kind != chat.ApprovalKindBudget || !strings.HasPrefix(pending[0].ApprovalID, chat.BudgetApprovalPrefix+"tenant-") ||
		!strings.Contains(pending[0].Reason, "25% of tenant acme's token budget") {
		t.Fatalf("pending approvals = %+v, want the park on the tenant's budget", pending)
	}
	if _, err := a2.a.Answer(ctx, []chat.ToolAnswer{{ApprovalID: pending[0].ApprovalID, Approved: ptr(true)}}, nil); err != nil {
		t.Fatal(err)
	}
	a2.r.Wait()
	settled(t, e, "a2")
	if tr := lastTurn(t, e, "a2"); tr.RequestID != turn.RequestID || tr.Status != chat.TurnCompleted {
		t.Fatalf("turn = %s %s (%s), want %s completed", tr.RequestID, tr.Status, tr.Error, turn.RequestID)
	}
	spentTokens(t, e, a2, "a2", "r3")
	if tr := lastTurn(t, e, "a2"); tr.Status != chat.TurnCompleted {
		t.Fatalf("turn after the approval = %s (%s), want completed", tr.Status, tr.Error)
	}
	if n := len(eventsOfAgent(t, e, "a2", chat.EventBudgetParked)); n != 1 {
		t.Fatalf("%d budget.parked events, want 1", n)
	}
}

func eventsOfAgent(t *testing.T, e *env, agent, typ string) []eventlog.Event {
	t.Helper()
	evs, err := e.lg.Read(t.Context(), eventlog.Filter{Agent: agent}, 0, 0)
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

// TestTenantTotalsFollowRows: the tenant's spend read from the totals
// equals the sum of every agent's spend rows, for periods starting on a
// day, an hour and a minute (and off the minute, read from the rows),
// after an agent's compaction (its snapshot replaces its rows), usage
// after it, and another agent's deletion (its spend leaves the tenant's
// with its rows); and a view rebuilt from the log (the snapshot, not the
// purged events) has the same totals.
func TestTenantTotalsFollowRows(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	start := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	own := map[string][]struct {
		at  time.Time
		tok int64
	}{}
	add := func(agent, req string, at time.Time, tok, sub int64) {
		appendUsage(t, e, agent, req, at, tok, sub)
		own[agent] = append(own[agent], struct {
			at  time.Time
			tok int64
		}{at, tok - sub})
	}
	for i, agent := range []string{"a1", "a2", "a3", "a4"} {
		k := int64(i + 1)
		add(agent, "r1", start.Add(-25*time.Hour), 1000*k, 0)
		add(agent, "r2", start.Add(-90*time.Minute), 100*k, 0)
		add(agent, "r3", start.Add(30*time.Second), 10*k, 3)
		add(agent, "r4", start.Add(61*time.Minute+15*time.Second), k, 0)
	}
	appendUsage(t, e, "a1", "r2", start, 77, 0) // a request again: counted once
	sinces := []time.Time{start.Add(-48 * time.Hour), start.Add(-2 * time.Hour), start.Add(-time.Hour),
		start, start.Add(time.Minute), start.Add(45 * time.Second), start.Add(time.Hour), start.Add(62 * time.Minute)}
	check := func(store *chat.Store, lg *eventlog.Log, when string) {
		t.Helper()
		last, err := lg.LastSeq(ctx, eventlog.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.WaitFor(ctx, last); err != nil {
			t.Fatal(err)
		}
		for _, since := range sinces {
			var want int64
			for _, us := range own {
				for _, u := range us {
					if !u.at.Before(since) {
						want += u.tok
					}
				}
			}
			got, err := store.BudgetSpendAll(since)
			if err != nil {
				t.Fatal(err)
			}
			rows, err := store.BudgetSpendAllRows(since)
			if err != nil {
				t.Fatal(err)
			}
			if got.Tokens != want || rows.Tokens != want {
				t.Fatalf("%s, since %s: totals %d tokens, rows %d, want %d", when, since.Sub(start), got.Tokens, rows.Tokens, want)
			}
		}
	}
	check(e.store, e.lg, "live")

	if _, err := e.lg.Compact(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	add("a2", "r5", start.Add(2*time.Hour), 5000, 0)
	appendUsage(t, e, "a2", "r3", start.Add(2*time.Hour), 9999, 0) // counted before the snapshot: once
	check(e.store, e.lg, "after a compaction")

	if _, err := e.lg.Delete(ctx, "a3"); err != nil {
		t.Fatal(err)
	}
	delete(own, "a3")
	check(e.store, e.lg, "after a deletion")

	lg := eventlogtest.OpenOn(t, e.srv, eventlog.Config{})
	store, prs, err := chat.OpenStore(lg)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range prs {
		eventlogtest.RunProjector(t, pr)
	}
	check(store, lg, "rebuilt")
}
