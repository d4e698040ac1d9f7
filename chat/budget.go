package chat

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/forever-agents/forever/chat/cost"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/apierror"
	"github.com/forever-agents/forever/internal/promreg"
	"github.com/forever-agents/forever/tracing"
)

// An agent's budget: limits on the tokens and the cost of its turns' model
// calls within a period, set by budget.set events on its log and checked
// against what its usage.recorded events say it spent (the budget view),
// so the spend is exact after a crash or an ownership move: there is no
// counter apart from the log.
//
// Periods are fixed windows aligned to the Unix epoch: a 24h budget
// resets at 00:00 UTC, a 1h one on the hour. A turn is counted in the
// period its usage.recorded falls in (when it ended).
//
// The check runs before every model call of a turn (checkBudgetAtCall):
// the spend of the period plus what the running turn has used so far. At
// or past a hard limit the turn records its usage so far and fails with a
// *BudgetError (code 402, turn.failed's code); BudgetRefusal refuses new
// turns the same way until the period resets. At the soft fraction of a
// limit the turn parks for an approval (budget_soft.go).
//
// A sub-agent's spend counts against its parent's budget as well as its
// own: the parent's usage.recorded carries the usage of its turn's ended
// sub-agent calls (Subagents, from the child notices recorded on the
// parent's log), and the budget view counts it with the turn's own
// tokens, once per request. Sub-agent spend is counted in tokens; a
// child's cost counts against the child's own cost budget.

// EventBudgetSet sets some of an agent's budget limits: {tokens?, cost?,
// period?, soft?}; a field left out keeps its value.
const EventBudgetSet = "budget.set"

// BudgetProjectionName is the name of the budget view.
const BudgetProjectionName = "budget"

// DefaultBudgetPeriod is the period of a budget set without one.
const DefaultBudgetPeriod = 24 * time.Hour

// DefaultBudgetSoft is the soft fraction of a budget set without one.
const DefaultBudgetSoft = 0.8

// ErrInvalidBudget is returned by SetBudget for limits out of range.
var ErrInvalidBudget error = apierror.Declare("chat", apierror.BadRequest, "invalid budget")

// BudgetUpdate sets some of an agent's budget limits; nil fields keep
// their value. A zero Tokens or Cost is no limit on it.
type BudgetUpdate struct {
	Tokens *int64       `json:"tokens,omitempty"`
	Cost   *cost.Micros `json:"cost,omitempty"`
	// Period is a Go duration of at least a minute ("24h", "1h30m").
	Period *string `json:"period,omitempty"`
	// Soft is the fraction of a limit past which a turn should ask for
	// approval, in (0, 1]; 1 is no soft stop.
	Soft *float64 `json:"soft,omitempty"`
}

// BudgetLimits are an agent's budget limits. Zero Tokens or Cost: no
// limit on it.
type BudgetLimits struct {
	Tokens int64       `json:"tokens"`
	Cost   cost.Micros `json:"cost"`
	Period string      `json:"period"`
	Soft   float64     `json:"soft"`
}

// Limited reports whether l limits anything.
func (l BudgetLimits) Limited() bool { return l.Tokens > 0 || l.Cost > 0 }

// period returns l's period, DefaultBudgetPeriod when unset or invalid.
func (l BudgetLimits) period() time.Duration {
	d, err := time.ParseDuration(l.Period)
	if err != nil || d < time.Minute {
		return DefaultBudgetPeriod
	}
	return d
}

// BudgetSpend is what an agent spent in a period.
type BudgetSpend struct {
	Tokens int64       `json:"tokens"`
	Cost   cost.Micros `json:"cost"`
}

// BudgetStatus is the reply of the budget verb: the limits, what the
// agent spent in the current period, when the period began and when it
// resets, and which limit is reached, if one is.
type BudgetStatus struct {
	BudgetLimits
	Spent       BudgetSpend `json:"spent"`
	PeriodStart time.Time   `json:"periodStart"`
	ResetsAt    time.Time   `json:"resetsAt"`
	// Exceeded names the hard limit reached, "tokens" or "cost"; empty
	// while the agent may call its model.
	Exceeded string `json:"exceeded,omitempty"`
	// SoftEnforced is true: a turn reaching the soft fraction of a limit
	// parks for an approval (budget_soft.go).
	SoftEnforced bool `json:"softEnforced"`
	// Shared are the budgets of the agent's user and tenant that limit
	// something (budget_shared.go), each with its spend; only on the
	// agent's own status.
	Shared []SharedBudgetStatus `json:"shared,omitempty"`
}

// BudgetError is a turn refused or ended because a hard budget limit is
// reached: code 402, with Retry-After until the period resets.
type BudgetError struct {
	Agent string
	// Scope is the budget's: ScopeAgent (also when empty), ScopeUser or
	// ScopeTenant; Name the user or tenant it is of.
	Scope    string
	Name     string
	Limit    string // "tokens" or "cost"
	Status   BudgetStatus
	Now      time.Time
	spentTok int64
	spentUSD cost.Micros
}

func (e *BudgetError) Error() string {
	l := e.Status.BudgetLimits
	var what string
	if e.Limit == "tokens" {
		what = fmt.Sprintf("token budget of %d tokens per %s is spent (%d used)", l.Tokens, l.Period, e.spentTok)
	} else {
		what = fmt.Sprintf("cost budget of $%s per %s is spent ($%s used)", l.Cost, l.Period, e.spentUSD)
	}
	return fmt.Sprintf("over budget: %s's %s; it resets at %s", scopeWho(e.Scope, e.Name, e.Agent), what, e.Status.ResetsAt.UTC().Format(time.RFC3339))
}

// StatusCode is 402 (Payment Required).
func (e *BudgetError) StatusCode() int { return http.StatusPaymentRequired }

// APIError is the 402 a client reads: the sentence of Error, which names
// no package, and the Retry-After of the period's reset.
func (e *BudgetError) APIError() *apierror.Error {
	return apierror.New(apierror.OverBudget, "%s", e.Error()).WithRetryAfter(e.RetryAfter()).WithCause(e)
}

// RetryAfter is the time left until the period resets.
func (e *BudgetError) RetryAfter() time.Duration {
	return max(e.Status.ResetsAt.Sub(e.Now), time.Second)
}

// budgetWindow returns the period of length d that holds now: its start
// and its end, aligned to the Unix epoch.
func budgetWindow(now time.Time, d time.Duration) (start, end time.Time) {
	n := now.UnixNano()
	s := n - n%int64(d)
	start = time.Unix(0, s).UTC()
	return start, start.Add(d)
}

// budgets is the role of an Agent that keeps its budgets: it sets and reads
// them (SetBudget, Budget), with the shared budgets of its user and tenant
// (budget_shared.go), refuses a command past a hard limit
// (BudgetRefusal), and answers a turn parked at a soft limit
// (answerBudget, budget_soft.go). The Agent embeds it: its methods are the
// Agent's. The checks of a running turn are that run's
// (turnRun.checkBudgetAtCall, checkSoftBudget).
type budgets struct {
	a       *Agent
	budgetM *budgetMetrics
	soft    softWait // turns parked at the soft budget limit
}

// SetBudget stores u over the agent's budget limits and returns its
// budget as it then stands.
func (bg *budgets) SetBudget(ctx context.Context, u BudgetUpdate) (BudgetStatus, error) {
	a := bg.a
	switch {
	case u.Tokens != nil && *u.Tokens < 0:
		return BudgetStatus{}, fmt.Errorf("%w: tokens must be 0 (no limit) or more, got %d", ErrInvalidBudget, *u.Tokens)
	case u.Cost != nil && *u.Cost < 0:
		return BudgetStatus{}, fmt.Errorf("%w: cost must be \"0\" (no limit) or more, got %s", ErrInvalidBudget, *u.Cost)
	case u.Soft != nil && (*u.Soft <= 0 || *u.Soft > 1):
		return BudgetStatus{}, fmt.Errorf("%w: soft must be a fraction in (0, 1], got %g", ErrInvalidBudget, *u.Soft)
	}
	if u.Period != nil {
		d, err := time.ParseDuration(*u.Period)
		if err != nil || d < time.Minute {
			return BudgetStatus{}, fmt.Errorf("%w: period must be a duration of at least 1m, like \"24h\", got %q", ErrInvalidBudget, *u.Period)
		}
	}
	if _, err := a.append(ctx, EventBudgetSet, u); err != nil {
		return BudgetStatus{}, err
	}
	a.budgetM.sets.Inc()
	a.soft.wakeAll() // a parked turn may be let go by the new limits
	return a.Budget(ctx)
}

// Budget returns the agent's budget: its limits, what it spent in the
// current period (its recorded turns'), and which limit is reached; and
// the shared budgets (its user's, its tenant's) that limit something,
// each with its spend (Config.SharedBudgets).
func (bg *budgets) Budget(ctx context.Context) (BudgetStatus, error) {
	a := bg.a
	l, err := a.store.BudgetLimits(a.agent)
	if err != nil {
		return BudgetStatus{}, err
	}
	st, _, err := a.budgetStatus(a.agentScope(l), 0, 0)
	if err != nil {
		return st, err
	}
	shared, err := a.sharedScopes(ctx)
	if err != nil {
		return st, err
	}
	for _, s := range shared {
		sst, _, err := a.budgetStatus(s, 0, 0)
		if err != nil {
			return st, err
		}
		st.Shared = append(st.Shared, SharedBudgetStatus{Scope: s.scope, Name: s.name, BudgetStatus: sst})
	}
	return st, nil
}

// budgetStatus is the budget of scope s now, with extraTok tokens and
// extraCost (a running turn's usage not recorded yet, its sub-agents'
// included where s counts them) counted as spent; err is a *BudgetError
// when a hard limit is reached.
func (bg *budgets) budgetStatus(s budgetScope, extraTok int64, extraCost cost.Micros) (BudgetStatus, *BudgetError, error) {
	a := bg.a
	l := s.limits
	now := a.cfg.Clock.Now()
	start, end := budgetWindow(now, l.period())
	spent, err := a.scopeSpend(s, start)
	if err != nil {
		return BudgetStatus{}, nil, err
	}
	st := BudgetStatus{BudgetLimits: l, Spent: spent, PeriodStart: start, ResetsAt: end, SoftEnforced: true}
	tok := spent.Tokens + extraTok
	usd := spent.Cost + extraCost
	switch {
	case l.Tokens > 0 && tok >= l.Tokens:
		st.Exceeded = "tokens"
	case l.Cost > 0 && usd >= l.Cost:
		st.Exceeded = "cost"
	default:
		return st, nil, nil
	}
	return st, &BudgetError{Agent: a.agent, Scope: s.scope, Name: s.name, Limit: st.Exceeded, Status: st, Now: now, spentTok: tok, spentUSD: usd}, nil
}

// BudgetRefusal returns a *BudgetError when a hard limit of the agent's
// budget, or of a shared budget it counts against (its user's, its
// tenant's), is reached, else nil: a new turn is refused with it. A
// request sent again, whose request id or message id (either may be
// empty) is a stored turn's, is let through: Send answers it with its
// first turn, which is no new work.
func (bg *budgets) BudgetRefusal(ctx context.Context, requestID, messageID string) error {
	a := bg.a
	scopes, err := a.budgetScopes(ctx)
	if err != nil || len(scopes) == 0 {
		return err
	}
	var be *BudgetError
	for _, s := range scopes {
		if _, be, err = a.budgetStatus(s, 0, 0); err != nil {
			return err
		} else if be != nil {
			break
		}
	}
	if be == nil {
		return nil
	}
	if requestID != "" {
		if _, err := a.store.Turn(a.agent, requestID); err == nil {
			return nil
		}
	}
	if messageID != "" {
		if _, err := a.store.Message(a.agent, messageID); err == nil {
			return nil
		}
	}
	a.budgetM.refused.WithLabelValues(be.scope(), "turn").Inc()
	return be
}

// checkBudgetAtCall runs before each model call of st: when a hard limit
// is reached, counting the turn's usage so far (its ended steps' and
// step, the current step's calls', and its ended sub-agent calls'), it
// records that usage (usage.recorded, so the spend stays exact) and
// returns a turnFailure with the *BudgetError, which ends the turn with
// code 402. Below it, the soft limit may park the turn first
// (checkSoftBudget). ctx is the turn's, wctx the one its writes go under.
func (st *turnRun) checkBudgetAtCall(ctx, wctx context.Context, step llm.Usage) error {
	a := st.a
	scopes, err := a.budgetScopes(ctx)
	if err != nil || len(scopes) == 0 {
		return err
	}
	used := st.turnUsage()
	used.InputTokens += step.InputTokens
	used.OutputTokens += step.OutputTokens
	// The turn's sub-agents' spend counts against this budget too.
	sub, err := a.subagentUsage(st.info.RequestID)
	if err != nil {
		return err
	}
	own := turnSpend{tok: used.InputTokens + used.OutputTokens, usd: a.costOf(used)}
	all := own
	if sub != nil {
		all.tok, all.usd = all.tok+sub.Input+sub.Output, all.usd+sub.Cost
	}
	statuses := make([]BudgetStatus, len(scopes))
	for i, s := range scopes {
		x := s.extra(own, all)
		bs, be, err := a.budgetStatus(s, x.tok, x.usd)
		if err != nil {
			return err
		}
		if be != nil {
			a.budgetM.refused.WithLabelValues(be.scope(), "model_call").Inc()
			return st.failForBudget(wctx, used, be)
		}
		statuses[i] = bs
	}
	for i, s := range scopes {
		x := s.extra(own, all)
		if err := st.checkSoftBudget(ctx, wctx, s, statuses[i], used, x.tok, x.usd); err != nil {
			return err
		}
	}
	return nil
}

// costOf is what u costs at the agent's price, 0 without one.
func (bg *budgets) costOf(u llm.Usage) cost.Micros {
	a := bg.a
	if a.cfg.Price == nil {
		return 0
	}
	return a.cfg.Price.Of(u.InputTokens, u.OutputTokens, 0)
}

// noteCost counts the cost of a turn's recorded usage in the metrics and
// on its span.
func (st *turnRun) noteCost(u llm.Usage) {
	a := st.a
	if a.cfg.Price == nil {
		return
	}
	c := a.costOf(u)
	a.budgetM.cost.Add(float64(c) / 1e6)
	if st.span != nil && st.span.IsRecording() {
		st.span.SetAttributes(tracing.UsageCost.String(c.String()))
	}
}

// budgetMetrics are the metrics of costs and budgets, shared by every
// Agent on one Registerer.
type budgetMetrics struct {
	cost    prometheus.Counter
	sets    prometheus.Counter
	refused *prometheus.CounterVec // scope: agent, user, tenant; at: turn, model_call
	parks   *prometheus.CounterVec // event: parked, approved, denied
}

func newBudgetMetrics(reg prometheus.Registerer) (*budgetMetrics, error) {
	m := &budgetMetrics{
		cost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_chat_cost_dollars_total",
			Help: "Cost of the model usage of completed turns, in dollars at the daemon's prices (--prices).",
		}),
		sets: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_budget_sets_total",
			Help: "Agent budgets set (budget verb with limits).",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forever_budget_refusals_total",
			Help: "Work refused because a hard budget limit is reached (402), by the budget's scope (agent, user, tenant): a new turn (at=turn), or a turn ended before a model call (at=model_call).",
		}, []string{"scope", "at"}),
		parks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forever_budget_parks_total",
			Help: "Turns parked at an agent's soft budget limit (event=parked), and parks approved or denied (event=approved, denied).",
		}, []string{"event"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.cost, err = promreg.Register(reg, m.cost); err != nil {
		return nil, err
	}
	if m.sets, err = promreg.Register(reg, m.sets); err != nil {
		return nil, err
	}
	if m.refused, err = promreg.Register(reg, m.refused); err != nil {
		return nil, err
	}
	if m.parks, err = promreg.Register(reg, m.parks); err != nil {
		return nil, err
	}
	for _, scope := range []string{ScopeAgent, ScopeUser, ScopeTenant} {
		for _, at := range []string{"turn", "model_call"} {
			m.refused.WithLabelValues(scope, at)
		}
	}
	for _, ev := range []string{"parked", "approved", "denied"} {
		m.parks.WithLabelValues(ev)
	}
	return m, nil
}

// The budget view's rows:
//
//	b\0<agent>                       BudgetLimits JSON
//	d\0<agent>\0<requestId>          "1": the request's usage is counted
//	p\0<agent>\0<time><requestId>    budgetSpendRow JSON, time the
//	                                 usage.recorded's, 8 bytes BE ns
//	T\0<level><start>                budgetSpendRow JSON: every agent's
//	                                 own spend (Tokens-SubTokens) in the
//	                                 minute, hour or day (level m, h, d)
//	                                 from start, 8 bytes BE ns
func budgetKey(agent string) []byte { return []byte("b\x00" + agent) }
func budgetDoneKey(agent, req string) []byte {
	return []byte("d\x00" + agent + "\x00" + req)
}
func budgetSpendPrefix(agent string) []byte { return []byte("p\x00" + agent + "\x00") }
func budgetSpendKey(agent string, at time.Time, req string) []byte {
	return append(binary.BigEndian.AppendUint64(budgetSpendPrefix(agent), uint64(max(at.UnixNano(), 0))), req...)
}

type budgetSpendRow struct {
	Tokens int64       `json:"t"`
	Cost   cost.Micros `json:"c,omitempty"`
	// SubTokens and SubCost are the part of Tokens and Cost that is the
	// request's sub-agents' (counted again on their own rows).
	SubTokens int64       `json:"st,omitempty"`
	SubCost   cost.Micros `json:"sc,omitempty"`
}

// BudgetProjection keeps each agent's budget limits (budget.set, merged)
// and its spend in time order (the first usage.recorded of each request:
// its own tokens and cost), so the spend of any period is a range read.
//
// It also keeps the tenant's totals (budget_total.go): every agent's own
// spend per minute, hour and day, kept as usage is applied and as the
// Follower removes or replaces an agent's rows (RowsChanged), so a
// tenant's budget check reads a few rows whatever its agents. Version 3
// added them; its rows of an agent are version 2's, so snapshots stay
// readable both ways (RowsReadableFrom).
func BudgetProjection() eventlog.Projection { return budgetProjection(nil) }

// budgetProjection is BudgetProjection telling unbudgeted (when not nil)
// of each commit that may set an agent's limits (budgetlimits.go).
func budgetProjection(unbudgeted *flagCache) eventlog.Projection {
	apply := applyBudget
	if unbudgeted != nil {
		apply = func(b *eventlog.Batch, e eventlog.Event) error {
			limitsMaySet(unbudgeted, b, e)
			return applyBudget(b, e)
		}
	}
	return eventlog.Projection{Name: BudgetProjectionName, Version: 3, RowsReadableFrom: 2, Filter: eventlog.Filter{}, Apply: apply,
		AgentRows:   agentRows(keys(budgetKey, budgetWaitKey, budgetApprovedKey), prefixes("d", "p", "a", "s")),
		RowsChanged: budgetRowsChanged}
}

func applyBudget(b *eventlog.Batch, e eventlog.Event) error {
	switch e.Type {
	case EventBudgetSet:
		var u BudgetUpdate
		if !decodeData(e, &u) {
			return nil
		}
		l := BudgetLimits{Period: "24h", Soft: DefaultBudgetSoft}
		if _, err := getJSON(b, budgetKey(e.Agent), &l); err != nil {
			return err
		}
		if u.Tokens != nil {
			l.Tokens = *u.Tokens
		}
		if u.Cost != nil {
			l.Cost = *u.Cost
		}
		if u.Period != nil {
			l.Period = *u.Period
		}
		if u.Soft != nil {
			l.Soft = *u.Soft
		}
		return setJSON(b, budgetKey(e.Agent), l)
	case EventUsageRecorded, EventTurnCompleted:
		// A turn.completed of record format 8 carries its turn's usage:
		// spent as a usage.recorded before it would be, then read as the
		// outcome it is.
		if u, ok := usageOf(e); ok {
			if err := applySpend(b, e, u); err != nil {
				return err
			}
		}
		if e.Type == EventUsageRecorded {
			return nil
		}
	}
	return applySoftBudget(b, e.Agent, e.Type, e.Data)
}

// applySpend adds usage u, recorded by e, to the agent's spend and the
// tenant's total, once per request id.
func applySpend(b *eventlog.Batch, e eventlog.Event, u usageRecorded) error {
	if _, err := b.Get(budgetDoneKey(e.Agent, u.RequestID)); err == nil {
		return nil
	} else if !isNotFound(err) {
		return err
	}
	if err := b.Set(budgetDoneKey(e.Agent, u.RequestID), []byte("1")); err != nil {
		return err
	}
	row := budgetSpendRow{Tokens: u.Input + u.Output, Cost: u.Cost}
	if u.Subagents != nil {
		row.SubTokens, row.SubCost = u.Subagents.Input+u.Subagents.Output, u.Subagents.Cost
		row.Tokens += row.SubTokens
		row.Cost += row.SubCost
	}
	if err := setJSON(b, budgetSpendKey(e.Agent, e.Time, u.RequestID), row); err != nil {
		return err
	}
	return addTenantTotal(b, e.Time, row, 1)
}

// BudgetLimits returns agent's budget limits: the defaults (no limit, a
// 24h period, soft 0.8) until a budget is set. Every set that a WaitFor of
// its sequence confirmed is seen; an agent found without limits is not
// read again until limits may have been set since (budgetlimits.go).
func (s *Store) BudgetLimits(agent string) (BudgetLimits, error) {
	l := BudgetLimits{Period: "24h", Soft: DefaultBudgetSoft}
	g := s.unbudgeted.gen.Load()
	if s.unbudgeted.knownUnset(agent, "", g) {
		return l, nil
	}
	ok, err := getJSON(s.budget, budgetKey(agent), &l)
	if err == nil && !ok {
		s.unbudgeted.readUnset(agent, "", g)
	}
	return l, err
}

// BudgetSpend returns what agent's recorded turns spent since since.
func (s *Store) BudgetSpend(agent string, since time.Time) (BudgetSpend, error) {
	var sp BudgetSpend
	from := budgetSpendKey(agent, since, "")
	for kv, err := range s.budget.ScanFrom(budgetSpendPrefix(agent), from) {
		if err != nil {
			return sp, err
		}
		var r budgetSpendRow
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return sp, err
		}
		sp.Tokens += r.Tokens
		sp.Cost += r.Cost
	}
	return sp, nil
}
