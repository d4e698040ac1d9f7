package agentd

import (
	"flag"
	"strconv"

	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/chat/cost"
)

// userBudgetFlags defines --user-token-budget and --user-cost-budget:
// Config.UserBudget.
func userBudgetFlags(fs *flag.FlagSet, cfg *Config) {
	tokens := func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }
	dollars := func(s string) (int64, error) { m, err := cost.ParseMicros(s); return int64(m), err }
	for _, f := range []struct {
		name   string
		dst    **auth.BudgetLimit
		amount func(string) (int64, error)
		usage  string
	}{
		{"user-token-budget", &cfg.UserBudget.UserTokens, tokens, "at most `n/period[/soft]` tokens of each user's agents together (the agent's meta user), e.g. 100000/24h; under --auth the default of a tenant whose record sets none"},
		{"user-cost-budget", &cfg.UserBudget.UserCost, dollars, "at most `dollars/period[/soft]` of each user's agents together, e.g. 1.00/24h; under --auth the default of a tenant whose record sets none"},
	} {
		fs.Func(f.name, f.usage, func(s string) error {
			l, err := auth.ParseBudgetLimit(s, f.amount)
			if err != nil {
				return err
			}
			if l.N == 0 {
				*f.dst = nil
				return nil
			}
			*f.dst = &l
			return nil
		})
	}
}

// UserBudgetOf returns the budget a tenant whose record holds b has: b
// over the node's per-user budget (Config.UserBudget), which a record's
// own user limits replace.
func (c Config) UserBudgetOf(b auth.Budget) auth.Budget {
	out := b
	if out.UserTokens == nil {
		out.UserTokens = c.UserBudget.UserTokens
	}
	if out.UserCost == nil {
		out.UserCost = c.UserBudget.UserCost
	}
	return out
}
