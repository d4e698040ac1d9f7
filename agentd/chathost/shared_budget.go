package chathost

import (
	"context"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agents"
	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/cost"
	"github.com/forever-agents/forever/eventlog"
)

// sharedBudgets is the chat.SharedBudgets of a tenant's chat agents: the
// tenant's budget and its per-user budget, from the tenant's record
// (agentd.TenantLink.Budget, read at every check so tenant create changes
// them for running agents) over the node's per-user budget
// (Config.UserBudget, also a daemon's without tenants), and the agents of
// a user from the agents view.
//
// The spend is read from this node's views, which follow the tenant's
// whole events stream: before answering, BudgetsOf waits until they
// applied every event the stream held (one stream info request), so the
// usage other nodes' agents recorded is counted. Two turns checked at the
// same moment on two nodes may both pass: a budget is overspent by at
// most the model calls under way when it is reached.
type sharedBudgets struct {
	tenant string
	budget func() auth.Budget
	log    *eventlog.Log
	views  *eventlog.Follower
	agents *agents.View
}

var _ chat.SharedBudgets = (*sharedBudgets)(nil)

// newSharedBudgets returns the shared budgets of a tenant's daemon; nil
// for a daemon that serves no tenant.
func newSharedBudgets(deps *agentd.Deps) (*sharedBudgets, error) {
	cfg := deps.Config
	s := &sharedBudgets{log: deps.Log, views: deps.Views}
	switch link := cfg.Tenant; {
	case link != nil && link.Budget != nil:
		s.tenant = link.Name
		s.budget = func() auth.Budget { return cfg.UserBudgetOf(link.Budget()) }
	case !cfg.UserBudget.IsZero():
		// A daemon of no tenant: the node's per-user budget only.
		user := auth.Budget{UserTokens: cfg.UserBudget.UserTokens, UserCost: cfg.UserBudget.UserCost}
		s.budget = func() auth.Budget { return user }
	default:
		return nil, nil
	}
	v, err := deps.Log.View(agents.ProjectionName)
	if err != nil {
		return nil, err
	}
	s.agents = agents.NewView(v)
	return s, nil
}

// limitsOf turns a token and a cost limit into chat budget limits: one
// when they share their period and soft fraction, else one each. No soft
// fraction is no soft stop (1).
func limitsOf(tokens, dollars *auth.BudgetLimit) []chat.BudgetLimits {
	var out []chat.BudgetLimits
	soft := func(l *auth.BudgetLimit) float64 {
		if l.Soft <= 0 {
			return 1
		}
		return l.Soft
	}
	switch {
	case tokens != nil && dollars != nil && tokens.Period == dollars.Period && tokens.Soft == dollars.Soft:
		out = append(out, chat.BudgetLimits{Tokens: tokens.N, Cost: cost.Micros(dollars.N), Period: tokens.Period, Soft: soft(tokens)})
	default:
		if tokens != nil {
			out = append(out, chat.BudgetLimits{Tokens: tokens.N, Period: tokens.Period, Soft: soft(tokens)})
		}
		if dollars != nil {
			out = append(out, chat.BudgetLimits{Cost: cost.Micros(dollars.N), Period: dollars.Period, Soft: soft(dollars)})
		}
	}
	return out
}

// BudgetsOf returns the tenant's budgets and agent's user's, once the
// views applied the stream (while they are stalled, what they hold).
func (s *sharedBudgets) BudgetsOf(ctx context.Context, agent string) ([]chat.SharedBudget, error) {
	b := s.budget()
	if b.IsZero() {
		return nil, nil
	}
	if s.log.Stalled() == nil {
		last, err := s.log.LastSeq(ctx, eventlog.Filter{})
		if err != nil {
			return nil, err
		}
		if err := s.views.WaitFor(ctx, last); err != nil {
			return nil, err
		}
	}
	var out []chat.SharedBudget
	for _, l := range limitsOf(b.Tokens, b.Cost) {
		out = append(out, chat.SharedBudget{Scope: chat.ScopeTenant, Name: s.tenant, Limits: l})
	}
	user := limitsOf(b.UserTokens, b.UserCost)
	if len(user) == 0 {
		return out, nil
	}
	e, ok, err := s.agents.Get(agent, agents.Types{})
	if err != nil || !ok || e.User == "" {
		return out, err
	}
	members, err := s.agents.UserAgents(e.User)
	if err != nil {
		return nil, err
	}
	for _, l := range user {
		out = append(out, chat.SharedBudget{Scope: chat.ScopeUser, Name: e.User, Limits: l, Agents: members})
	}
	return out, nil
}
