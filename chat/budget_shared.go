package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/forever-agents/forever/chat/cost"
	"github.com/forever-agents/forever/eventlog"
)

// Shared budgets: limits on the spend of several agents together, checked
// with the agent's own budget before every model call and every new turn.
// A user's budget (ScopeUser) counts the spend of every agent whose user
// (its meta) is that user; a tenant's (ScopeTenant) the spend of every
// agent of the log (a tenant's daemon has a log of its own). What the
// budgets are, and which agents a user's counts, comes from
// Config.SharedBudgets (agentd: the tenant's record and the agents view);
// the spend comes from the budget view, as the agent's own does: the
// usage.recorded events of the agents in the period, so it is exact after
// a crash or an ownership move, and on every node once its views applied
// the log up to the check (SharedBudgets waits for that).
//
// Counting: a tenant's spend is each agent's own model calls, once (a
// sub-agent is an agent of the tenant: its spend is on its own rows). A
// user's is each of the user's agents' spend with its sub-agents' (a
// sub-agent has no user unless a client gives it one; one given the same
// user counts twice). A running turn counts its usage so far the same way.
//
// Outcomes are the agent budget's: past a hard limit the turn ends with
// 402 and new turns are refused until the period resets, with a sentence
// naming the budget ("tenant acme's token budget of ..."); at a soft
// fraction below 1 the turn parks for an approval, one park per budget
// scope and period (approval ids budget-user-… and budget-tenant-…).
// Limits changed meanwhile do not wake a parked turn; the period's reset
// does.

// Budget scopes: whose budget a status, an error or a park is.
const (
	ScopeAgent  = "agent"
	ScopeUser   = "user"
	ScopeTenant = "tenant"
)

// SharedBudget is a budget over the spend of several agents.
type SharedBudget struct {
	// Scope is ScopeUser or ScopeTenant; Name is the user or the tenant.
	Scope string
	Name  string
	// Limits; a Period that is not a duration of at least a minute is
	// DefaultBudgetPeriod, a Soft outside (0, 1) no soft stop.
	Limits BudgetLimits
	// Agents are the agents whose spend counts, with their sub-agents'
	// (a user's). Nil: every agent of the log, each its own (a tenant's).
	Agents []string
}

// SharedBudgets tells an agent the shared budgets it counts against.
type SharedBudgets interface {
	// BudgetsOf returns the shared budgets of agent that limit something,
	// once the budget view applied every event the log held when it was
	// called (so other agents' spend is counted). It is called before
	// every model call and every new turn of an agent.
	BudgetsOf(ctx context.Context, agent string) ([]SharedBudget, error)
}

// SharedBudgetStatus is a shared budget with its spend in the current
// period.
type SharedBudgetStatus struct {
	Scope string `json:"scope"`
	Name  string `json:"name"`
	BudgetStatus
}

// budgetScope is one budget a turn counts against.
type budgetScope struct {
	scope, name string
	limits      BudgetLimits
	agents      []string // ScopeUser's agents
}

// turnSpend is a running turn's usage not recorded yet.
type turnSpend struct {
	tok int64
	usd cost.Micros
}

// extra is what of a running turn's usage counts against s: the turn's
// own (own), or with its sub-agents' (all).
func (s budgetScope) extra(own, all turnSpend) turnSpend {
	if s.scope == ScopeTenant {
		return own
	}
	return all
}

func (e *BudgetError) scope() string {
	if e.Scope == "" {
		return ScopeAgent
	}
	return e.Scope
}

// scopeWho names a budget's owner in a sentence: "agent a1", "user
// alice", "tenant acme".
func scopeWho(scope, name, agent string) string {
	switch scope {
	case ScopeUser, ScopeTenant:
		return scope + " " + name
	}
	return "agent " + agent
}

func (s budgetScope) who(agent string) string { return scopeWho(s.scope, s.name, agent) }

func (bg *budgets) agentScope(l BudgetLimits) budgetScope {
	a := bg.a
	return budgetScope{scope: ScopeAgent, name: a.agent, limits: l}
}

// sharedScopes returns the shared budgets of the agent that limit
// something (Config.SharedBudgets).
func (bg *budgets) sharedScopes(ctx context.Context) ([]budgetScope, error) {
	a := bg.a
	if a.cfg.SharedBudgets == nil {
		return nil, nil
	}
	bs, err := a.cfg.SharedBudgets.BudgetsOf(ctx, a.agent)
	if err != nil {
		return nil, err
	}
	var out []budgetScope
	for _, b := range bs {
		l := b.Limits
		if !l.Limited() || (b.Scope != ScopeUser && b.Scope != ScopeTenant) {
			continue
		}
		if d, err := time.ParseDuration(l.Period); err != nil || d < time.Minute {
			l.Period = DefaultBudgetPeriod.String()
		}
		if l.Soft <= 0 || l.Soft > 1 {
			l.Soft = 1
		}
		s := budgetScope{scope: b.Scope, name: b.Name, limits: l}
		if b.Scope == ScopeUser {
			s.agents = b.Agents
		}
		out = append(out, s)
	}
	return out, nil
}

// budgetScopes returns every budget the agent's turns count against that
// limits something: its own, then the shared ones.
func (bg *budgets) budgetScopes(ctx context.Context) ([]budgetScope, error) {
	a := bg.a
	l, err := a.store.BudgetLimits(a.agent)
	if err != nil {
		return nil, err
	}
	var out []budgetScope
	if l.Limited() {
		out = append(out, a.agentScope(l))
	}
	shared, err := a.sharedScopes(ctx)
	if err != nil {
		return nil, err
	}
	return append(out, shared...), nil
}

// scopeNow returns s as it stands now (its limits may have changed), ok
// false when it no longer limits anything.
func (bg *budgets) scopeNow(ctx context.Context, s budgetScope) (budgetScope, bool, error) {
	a := bg.a
	if s.scope == ScopeAgent {
		l, err := a.store.BudgetLimits(a.agent)
		return a.agentScope(l), err == nil && l.Limited(), err
	}
	shared, err := a.sharedScopes(ctx)
	if err != nil {
		return s, false, err
	}
	for _, n := range shared {
		if n.scope == s.scope && n.name == s.name && n.limits.Period == s.limits.Period {
			return n, true, nil
		}
	}
	return s, false, nil
}

// scopeSpend is what the agents s counts spent since since.
func (bg *budgets) scopeSpend(s budgetScope, since time.Time) (BudgetSpend, error) {
	a := bg.a
	switch s.scope {
	case ScopeTenant:
		return a.store.BudgetSpendAll(since)
	case ScopeUser:
		var sp BudgetSpend
		for _, ag := range s.agents {
			one, err := a.store.BudgetSpend(ag, since)
			if err != nil {
				return sp, err
			}
			sp.Tokens += one.Tokens
			sp.Cost += one.Cost
		}
		return sp, nil
	}
	return a.store.BudgetSpend(a.agent, since)
}

// budgetSpendAllRows is BudgetSpendAll read from every agent's rows: one
// iterator, one seek per agent with rows before the period, and the rows
// of the period. It costs a seek per agent (budget_total.go).
func (s *Store) budgetSpendAllRows(since time.Time) (BudgetSpend, error) {
	var sp BudgetSpend
	all := []byte("p\x00")
	var bad error
	err := s.budget.ScanSeek(all, func(kv eventlog.KV) ([]byte, bool) {
		rest := kv.Key[len(all):]
		n := bytes.IndexByte(rest, 0)
		if n < 0 {
			return nil, false
		}
		if seek := budgetSpendKey(string(rest[:n]), since, ""); bytes.Compare(kv.Key, seek) < 0 {
			return seek, false // skip the agent's rows before the period
		}
		var r budgetSpendRow
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			bad = corrupt("budget spend row", err)
			return nil, true
		}
		sp.Tokens += r.Tokens - r.SubTokens
		sp.Cost += r.Cost - r.SubCost
		return nil, false
	})
	return sp, errors.Join(err, bad)
}
