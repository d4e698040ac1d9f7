package chat

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/cost"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/apierror"
)

// The soft limit. Before a model call, when the spend of the period (with
// the running turn's usage) reaches the soft fraction of a token or cost
// limit, and no park of the agent was approved in this period, the turn
// parks: it appends budget.parked (approval id BudgetApprovalPrefix, the
// request id and the period's start), writes a data-budget part saying
// why, and waits idle in its fiber for the decision, as a turn waits for
// its sub-agents (the agent may be deactivated meanwhile: recovery
// resumes the turn at the same call, which finds the park and waits
// again). The park is a pending approval (PendingApprovals, kind
// "budget"); approve answers it with Answer (budget.decided): approved,
// the turn goes on to its model call, and no turn of the agent parks
// again until the period resets (the hard limit still ends it); denied,
// the turn ends with its usage recorded, an error chunk and turn.failed
// with code 402 naming the denial. A turn cancelled while parked ends as
// any cancelled turn, and its park is no longer pending. A park is also
// released by its own turn when the period resets, or when new limits
// (SetBudget) no longer put the spend at the soft limit; a release
// leaves the period open to parks.
//
// Crash safety: the park is an event, the decision another; the usage is
// recorded once, when the turn ends (the budget view counts the first
// usage.recorded of each request). A crash between the check and the
// model call re-runs the check, which finds the park (or the decision)
// and neither parks twice nor loses it.

// Events of the soft limit.
const (
	// EventBudgetParked: a turn parked at the soft limit (budgetPark).
	EventBudgetParked = "budget.parked"
	// EventBudgetDecided: a park was approved or denied (budgetDecision).
	EventBudgetDecided = "budget.decided"
)

// pointBudgetParked is the crash point after a park is durable, before
// the turn waits for its decision.
const pointBudgetParked = "budget-parked"

// BudgetApprovalPrefix starts the approval id of every budget park.
const BudgetApprovalPrefix = "budget-"

// PartBudget is the data part a parked turn writes: BudgetPark, its
// status "waiting", then "approved" or "denied".
const PartBudget = chunk.DataPrefix + "budget"

// ApprovalKindBudget is the Kind of a PendingApproval that is a budget
// park, not a tool call.
const ApprovalKindBudget = "budget"

// BudgetPark is a turn parked at a soft budget limit.
type BudgetPark struct {
	ApprovalID string `json:"approvalId"`
	RequestID  string `json:"requestId"`
	// Limit is "tokens" or "cost"; Threshold is the soft fraction of it
	// (tokens, or micro-dollars), Spent what was spent at the park, with
	// the turn's own usage so far.
	Limit string `json:"limit"`
	// Scope is whose budget it is: ScopeUser or ScopeTenant, empty for
	// the agent's own (budget_shared.go); Name the user or tenant.
	Scope       string    `json:"scope,omitempty"`
	Name        string    `json:"name,omitempty"`
	Threshold   int64     `json:"threshold"`
	Spent       int64     `json:"spent"`
	PeriodStart time.Time `json:"periodStart"`
	Reason      string    `json:"reason"`
	// ParkedAt is when the turn parked.
	ParkedAt time.Time `json:"parkedAt,omitzero"`
	// Status is "waiting", "approved" or "denied" (on the data part).
	Status string `json:"status,omitempty"`
}

// budgetDecision is the data of budget.decided.
type budgetDecision struct {
	ApprovalID  string    `json:"approvalId"`
	RequestID   string    `json:"requestId"`
	Approved    bool      `json:"approved"`
	Reason      string    `json:"reason,omitempty"`
	PeriodStart time.Time `json:"periodStart"`
	// Released: the turn let itself go (the period reset, or the limits
	// changed); the period stays open to parks.
	Released bool `json:"released,omitempty"`
	// Scope is the park's (BudgetPark.Scope): empty for the agent's own.
	Scope string `json:"scope,omitempty"`
}

// BudgetNotice is what Config.OnBudget is told: a park ("budget.parked")
// or its decision ("budget.approved", "budget.denied").
type BudgetNotice struct {
	Kind string     `json:"kind"`
	Park BudgetPark `json:"park"`
}

// BudgetDeniedError ends a parked turn whose continuation was denied:
// code 402.
type BudgetDeniedError struct {
	Agent  string
	Park   BudgetPark
	Reason string
}

func (e *BudgetDeniedError) Error() string {
	s := fmt.Sprintf("over soft budget: going on past %s was denied for agent %s", e.Park.Reason, e.Agent)
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// StatusCode is 402 (Payment Required).
func (e *BudgetDeniedError) StatusCode() int { return http.StatusPaymentRequired }

// APIError is the 402 a client reads: the sentence of Error, which names
// no package.
func (e *BudgetDeniedError) APIError() *apierror.Error {
	return apierror.New(apierror.OverBudget, "%s", e.Error()).WithCause(e)
}

// budgetApprovalID is the approval id of the park of turn requestID in
// the period starting at start, on the budget of scope (the agent's own:
// ScopeAgent or empty): the same for every run of the turn.
func budgetApprovalID(scope, requestID string, start time.Time) string {
	s := BudgetApprovalPrefix
	if scope != "" && scope != ScopeAgent {
		s += scope + "-"
	}
	return s + requestID + "-" + strconv.FormatInt(start.Unix(), 10)
}

// softReached returns the park of a turn whose spend (tok tokens, usd
// micro-dollars, the turn's usage counted) reached l's soft fraction; ok
// false below it, or without a soft stop (Soft 1). who names the budget's
// owner ("agent a1", "user alice").
func softReached(who string, l BudgetLimits, tok int64, usd cost.Micros) (p BudgetPark, ok bool) {
	if l.Soft <= 0 || l.Soft >= 1 {
		return p, false
	}
	pct := strconv.FormatFloat(l.Soft*100, 'f', -1, 64)
	// The threshold is the soft fraction of the limit rounded up: a spend
	// reaches it when it is at least the exact fraction.
	th := func(limit int64) int64 { return int64(math.Ceil(float64(limit) * l.Soft)) }
	switch {
	case l.Tokens > 0 && tok >= th(l.Tokens):
		return BudgetPark{Limit: "tokens", Threshold: th(l.Tokens), Spent: tok,
			Reason: fmt.Sprintf("%s%% of %s's token budget of %d tokens per %s (%d used)", pct, who, l.Tokens, l.Period, tok)}, true
	case l.Cost > 0 && int64(usd) >= th(int64(l.Cost)):
		return BudgetPark{Limit: "cost", Threshold: th(int64(l.Cost)), Spent: int64(usd),
			Reason: fmt.Sprintf("%s%% of %s's cost budget of $%s per %s ($%s used)", pct, who, l.Cost, l.Period, usd)}, true
	}
	return p, false
}

// softWait wakes a turn parked at the soft limit when its decision is
// stored, and serializes the decisions of one agent.
type softWait struct {
	mu      sync.Mutex
	decide  sync.Mutex
	waiters map[string]chan struct{}
}

func (w *softWait) register(id string) (chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	if w.waiters == nil {
		w.waiters = map[string]chan struct{}{}
	}
	w.waiters[id] = ch
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		if w.waiters[id] == ch {
			delete(w.waiters, id)
		}
		w.mu.Unlock()
	}
}

// wakeAll wakes every parked turn: the budget was set.
func (w *softWait) wakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ch := range w.waiters {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (w *softWait) wake(id string) {
	w.mu.Lock()
	ch := w.waiters[id]
	w.mu.Unlock()
	if ch != nil {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// checkSoftBudget runs before a model call of st once the hard limit is
// not reached (st0 is the budget with the turn's usage used counted): it
// returns nil when the call may go on, parking the turn first when the
// soft limit is reached (see the top of this file); the turn's own usage
// so far is used, and tok and usd count it with its sub-agents'. ctx is
// the turn's
// (a cancel ends the wait), wctx the one its writes go under.
func (st *turnRun) checkSoftBudget(ctx, wctx context.Context, s budgetScope, st0 BudgetStatus, used llm.Usage, tok int64, usd cost.Micros) error {
	a := st.a
	park, ok := softReached(s.who(a.agent), s.limits, st0.Spent.Tokens+tok, st0.Spent.Cost+usd)
	if !ok {
		return nil
	}
	if at, err := a.store.budgetApprovedPeriod(a.agent, s.scope); err != nil || at.Equal(st0.PeriodStart) {
		return err
	}
	if s.scope != ScopeAgent {
		park.Scope, park.Name = s.scope, s.name
	}
	park.ApprovalID, park.RequestID, park.PeriodStart = budgetApprovalID(s.scope, st.info.RequestID, st0.PeriodStart), st.info.RequestID, st0.PeriodStart
	park.ParkedAt = a.cfg.Clock.Now()
	dec, decided, err := a.store.budgetDecision(a.agent, park.ApprovalID)
	if err != nil {
		return err
	}
	if !decided {
		pending, waiting, err := a.store.PendingBudget(a.agent)
		if err != nil {
			return err
		}
		if !waiting || pending.ApprovalID != park.ApprovalID {
			if _, err := a.append(wctx, EventBudgetParked, park); err != nil {
				return fmt.Errorf("%w: %w", errWrite, err)
			}
			a.budgetM.parks.WithLabelValues("parked").Inc()
			a.noteBudget(wctx, "budget.parked", park)
		} else {
			park = pending
		}
		if err := a.crashPoint(wctx, pointBudgetParked); err != nil {
			return err
		}
		if err := st.showPark(wctx, park, "waiting"); err != nil {
			return err
		}
		reached := func() (bool, error) {
			s, ok, err := a.scopeNow(ctx, s)
			if err != nil {
				return true, err
			}
			if !ok {
				return false, nil
			}
			now, be, err := a.budgetStatus(s, tok, usd)
			if err != nil || be != nil {
				return true, err // past a hard limit now: the answer decides
			}
			_, still := softReached(s.who(a.agent), s.limits, now.Spent.Tokens+tok, now.Spent.Cost+usd)
			return still, nil
		}
		if dec, err = st.awaitBudgetDecision(ctx, wctx, park, st0.ResetsAt, reached); err != nil {
			return err
		}
	}
	status := "denied"
	if dec.Approved {
		status = "approved"
	}
	if err := st.showPark(wctx, park, status); err != nil {
		return err
	}
	if dec.Approved {
		return nil
	}
	return st.failForBudget(wctx, used, &BudgetDeniedError{Agent: a.agent, Park: park, Reason: dec.Reason})
}

// showPark writes park's data-budget part with status, unless the stream
// shows it so already.
func (st *turnRun) showPark(ctx context.Context, park BudgetPark, status string) error {
	em := st.emitter()
	if p, ok := em.b.dataPart(PartBudget, park.ApprovalID); ok {
		var cur BudgetPark
		if json.Unmarshal(p.Data, &cur) == nil && cur.Status == status {
			return nil
		}
	}
	park.Status = status
	data, err := json.Marshal(park)
	if err != nil {
		return err
	}
	if err := em.emit(ctx, chunk.Chunk{Type: PartBudget, ID: park.ApprovalID, Data: data}); err != nil {
		return fmt.Errorf("%w: %w", errWrite, err)
	}
	if _, err := em.w.Flush(ctx); err != nil {
		return fmt.Errorf("%w: %w", errWrite, err)
	}
	return nil
}

// awaitBudgetDecision waits idle for the decision on park: the fiber
// holds no keepalive reference and the turn no TurnLimiter admission
// meanwhile. The turn releases its own park (an approval that leaves the
// period open to parks) when the period resets first (the spend it was
// parked for is of a past period), and when the budget is set again so
// that the soft limit is no longer reached (reached says whether it is).
func (st *turnRun) awaitBudgetDecision(ctx, wctx context.Context, park BudgetPark, resets time.Time, reached func() (bool, error)) (budgetDecision, error) {
	a, f := st.a, st.f
	id := park.ApprovalID
	ch, done := a.soft.register(id)
	defer done()
	busy := f.Idle()
	a.idleTurn(st.at)
	defer func() {
		a.busyTurn(st.at)
		busy()
	}()
	release := func(why string) error {
		dec := budgetDecision{ApprovalID: id, RequestID: park.RequestID, Approved: true, Released: true, Reason: why, PeriodStart: park.PeriodStart, Scope: park.Scope}
		if _, err := a.append(wctx, EventBudgetDecided, dec); err != nil {
			return fmt.Errorf("%w: %w", errWrite, err)
		}
		a.budgetM.parks.WithLabelValues("approved").Inc()
		a.noteBudget(wctx, "budget.approved", park)
		return nil
	}
	// Registered, the turn reads the decision and the limits once before
	// it waits: a decision or a budget set between the park and the
	// registration woke no one (both are in the views before they wake).
	check := true
	for {
		dec, ok, err := a.store.budgetDecision(a.agent, id)
		if err != nil || ok {
			return dec, err
		}
		if check {
			check = false
			if still, err := reached(); err != nil {
				return dec, err
			} else if !still {
				if err := release("the budget was changed and its soft limit is no longer reached"); err != nil {
					return dec, err
				}
				continue
			}
		}
		select {
		case <-ch:
			check = true
		case <-a.cfg.Clock.After(max(resets.Sub(a.cfg.Clock.Now()), 0)):
			if err := release("the budget's period reset"); err != nil {
				return dec, err
			}
		case <-ctx.Done():
			return dec, context.Cause(ctx)
		case <-wctx.Done():
			return dec, context.Cause(wctx)
		}
	}
}

// failForBudget ends st before a model call for a budget: it records the
// turn's usage so far (used, and its sub-agents'), so the spend stays
// exact, and returns the turnFailure that ends the turn with code 402.
func (st *turnRun) failForBudget(ctx context.Context, used llm.Usage, cause error) error {
	a := st.a
	rec := usageRecorded{RequestID: st.info.RequestID, Input: used.InputTokens, Output: used.OutputTokens, Cost: a.costOf(used)}
	sub, err := a.subagentUsage(st.info.RequestID)
	if err != nil {
		return err
	}
	rec.Subagents = sub
	if used != (llm.Usage{}) || sub != nil {
		if _, err := a.append(ctx, EventUsageRecorded, rec); err != nil {
			return fmt.Errorf("%w: %w", errWrite, err)
		}
	}
	st.failCode = http.StatusPaymentRequired
	return &turnFailure{cause}
}

// answerBudget answers a budget park when ans names one (its approval id,
// or a call id that is one): ok false for any other answer. Approved, the
// parked turn goes on; denied, it ends with 402. It returns the parked
// turn. Errors: ErrUnknownToolCall when no turn waits on that park,
// ErrAlreadyAnswered when it was decided, ErrInvalidMessage without
// approved.
func (bg *budgets) answerBudget(ctx context.Context, answers []ToolAnswer) (Turn, bool, error) {
	a := bg.a
	if len(answers) != 1 {
		return Turn{}, false, nil
	}
	ans := answers[0]
	id := ans.ApprovalID
	if strings.HasPrefix(ans.CallID, BudgetApprovalPrefix) {
		id = ans.CallID
	} else if ans.CallID != "" || !strings.HasPrefix(id, BudgetApprovalPrefix) {
		return Turn{}, false, nil
	}
	if ans.Approved == nil {
		return Turn{}, true, fmt.Errorf("%w: a budget approval is answered with approved true or false", ErrInvalidMessage)
	}
	a.soft.decide.Lock()
	defer a.soft.decide.Unlock()
	if err := a.catchUp(ctx); err != nil {
		return Turn{}, true, err
	}
	if _, ok, err := a.store.budgetDecision(a.agent, id); err != nil {
		return Turn{}, true, err
	} else if ok {
		return Turn{}, true, fmt.Errorf("%w: budget approval %s", ErrAlreadyAnswered, id)
	}
	park, ok, err := a.store.PendingBudget(a.agent)
	if err != nil {
		return Turn{}, true, err
	}
	if !ok || park.ApprovalID != id {
		return Turn{}, true, fmt.Errorf("%w: budget approval %s", ErrUnknownToolCall, id)
	}
	dec := budgetDecision{ApprovalID: id, RequestID: park.RequestID, Approved: *ans.Approved, Reason: ans.Reason, PeriodStart: park.PeriodStart, Scope: park.Scope}
	if _, err := a.append(ctx, EventBudgetDecided, dec); err != nil {
		return Turn{}, true, err
	}
	kind := "denied"
	if dec.Approved {
		kind = "approved"
	}
	a.budgetM.parks.WithLabelValues(kind).Inc()
	a.noteBudget(ctx, "budget."+kind, park)
	a.soft.wake(id)
	info, err := a.store.Turn(a.agent, park.RequestID)
	if err != nil {
		return Turn{}, true, err
	}
	return Turn{RequestID: info.RequestID, StreamID: info.StreamID, MessageID: info.AssistantMessageID}, true, nil
}

// noteBudget tells Config.OnBudget of a park or a decision.
func (bg *budgets) noteBudget(ctx context.Context, kind string, park BudgetPark) {
	a := bg.a
	a.logger.Info("budget "+strings.TrimPrefix(kind, "budget."), "request", park.RequestID, "approval", park.ApprovalID, "why", park.Reason)
	if a.cfg.OnBudget != nil {
		a.cfg.OnBudget(context.WithoutCancel(ctx), BudgetNotice{Kind: kind, Park: park})
	}
}

// The budget view's rows of the soft limit:
//
//	w\0<agent>                  BudgetPark JSON: the park that waits
//	a\0<agent>\0<approvalId>    budgetDecision JSON
//	o\0<agent>                  the start of the period whose park was
//	                            approved, RFC 3339
//	s\0<agent>\0<scope>         the same for a shared budget's parks
func budgetWaitKey(agent string) []byte     { return []byte("w\x00" + agent) }
func budgetApprovedKey(agent string) []byte { return []byte("o\x00" + agent) }
func budgetScopeApprovedKey(agent, scope string) []byte {
	if scope == "" || scope == ScopeAgent {
		return budgetApprovedKey(agent)
	}
	return []byte("s\x00" + agent + "\x00" + scope)
}
func budgetDecisionKey(agent, id string) []byte {
	return []byte("a\x00" + agent + "\x00" + id)
}

// applySoftBudget applies the events of the soft limit, and ends the
// wait of a park whose turn ended (the ended events of turns).
func applySoftBudget(b *eventlog.Batch, agent, typ string, data json.RawMessage) error {
	switch typ {
	case EventBudgetParked:
		var p BudgetPark
		if json.Unmarshal(data, &p) != nil || p.ApprovalID == "" {
			return nil
		}
		if _, err := b.Get(budgetDecisionKey(agent, p.ApprovalID)); err == nil {
			return nil
		} else if !isNotFound(err) {
			return err
		}
		return setJSON(b, budgetWaitKey(agent), p)
	case EventBudgetDecided:
		var d budgetDecision
		if json.Unmarshal(data, &d) != nil || d.ApprovalID == "" {
			return nil
		}
		if _, err := b.Get(budgetDecisionKey(agent, d.ApprovalID)); err == nil {
			return nil // the first decision stands
		} else if !isNotFound(err) {
			return err
		}
		if err := setJSON(b, budgetDecisionKey(agent, d.ApprovalID), d); err != nil {
			return err
		}
		if d.Approved && !d.Released {
			if err := b.Set(budgetScopeApprovedKey(agent, d.Scope), []byte(d.PeriodStart.UTC().Format(time.RFC3339Nano))); err != nil {
				return err
			}
		}
		return clearWait(b, agent, func(p BudgetPark) bool { return p.ApprovalID == d.ApprovalID })
	case EventTurnCompleted, EventTurnFailed, EventTurnInterrupted:
		var t turnEnded
		if json.Unmarshal(data, &t) != nil || t.RequestID == "" {
			return nil
		}
		return clearWait(b, agent, func(p BudgetPark) bool { return p.RequestID == t.RequestID })
	}
	return nil
}

func clearWait(b *eventlog.Batch, agent string, match func(BudgetPark) bool) error {
	v, err := b.Get(budgetWaitKey(agent))
	if isNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	var p BudgetPark
	if json.Unmarshal(v, &p) == nil && !match(p) {
		return nil
	}
	return b.Delete(budgetWaitKey(agent))
}

// PendingBudget returns the budget park of agent that waits for a
// decision, if one does.
func (s *Store) PendingBudget(agent string) (BudgetPark, bool, error) {
	var p BudgetPark
	ok, err := getJSON(s.budget, budgetWaitKey(agent), &p)
	return p, ok, err
}

func (s *Store) budgetDecision(agent, id string) (budgetDecision, bool, error) {
	var d budgetDecision
	ok, err := getJSON(s.budget, budgetDecisionKey(agent, id), &d)
	return d, ok, err
}

// budgetApprovedPeriod is the start of the period in which a park of
// agent on the budget of scope was last approved; zero if none was.
func (s *Store) budgetApprovedPeriod(agent, scope string) (time.Time, error) {
	v, err := s.budget.Get(budgetScopeApprovedKey(agent, scope))
	if isNotFound(err) {
		return time.Time{}, nil
	} else if err != nil {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, string(v))
	if err != nil {
		return time.Time{}, nil
	}
	return t, nil
}

// parkedOnBudget reports whether turn requestID is parked at the soft
// budget limit, waiting for its decision.
func (bg *budgets) parkedOnBudget(requestID string) bool {
	a := bg.a
	p, ok, err := a.store.PendingBudget(a.agent)
	return err == nil && ok && p.RequestID == requestID
}
