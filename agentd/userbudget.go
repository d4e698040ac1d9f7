package agentd

import (
	"flag"
	"strconv"

	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/chat/cost"
)

// BudgetFlag defines a budget flag, <amount>/<period>[/<soft>], on fs:
// an amount of tokens, or of dollars when money; set gets each limit
// parsed.
func BudgetFlag(fs *flag.FlagSet, name, usage string, money bool, set func(auth.BudgetLimit)) {
	amount := func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }
	if money {
		amount = func(s string) (int64, error) { m, err := cost.ParseMicros(s); return int64(m), err }
	}
	fs.Func(name, usage, func(s string) error {
		l, err := auth.ParseBudgetLimit(s, amount)
		if err != nil {
			return err
		}
		set(l)
		return nil
	})
}

// userBudgetFlags defines --user-token-budget and --user-cost-budget:
// Config.UserBudget. A limit of 0 is none.
func userBudgetFlags(fs *flag.FlagSet, cfg *Config) {
	for _, f := range []struct {
		name  string
		dst   **auth.BudgetLimit
		money bool
		usage string
	}{
		{"user-token-budget", &cfg.UserBudget.UserTokens, false, "at most `n/period[/soft]` tokens of each user's agents together (the agent's meta user), e.g. 100000/24h; under --auth the default of a tenant whose record sets none"},
		{"user-cost-budget", &cfg.UserBudget.UserCost, true, "at most `dollars/period[/soft]` of each user's agents together, e.g. 1.00/24h; under --auth the default of a tenant whose record sets none"},
	} {
		BudgetFlag(fs, f.name, f.usage, f.money, func(l auth.BudgetLimit) {
			if l.N == 0 {
				*f.dst = nil
				return
			}
			*f.dst = &l
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
