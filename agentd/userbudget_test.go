package agentd

import (
	"errors"
	"testing"

	"github.com/forever-agents/forever/auth"
)

// TestUserBudgetFlags: --user-token-budget and --user-cost-budget (or
// their variables) set the node's per-user budget, a tenant's record's
// own user limits replace it, and a bad limit is refused naming the flag.
func TestUserBudgetFlags(t *testing.T) {
	cfg, err := ParseFlags([]string{"--user-token-budget", "600/24h"}, envFrom(map[string]string{"FOREVER_USER_COST_BUDGET": "1.50/1h/0.8"}))
	if err != nil {
		t.Fatal(err)
	}
	if l := cfg.UserBudget.UserTokens; l == nil || *l != (auth.BudgetLimit{N: 600, Period: "24h"}) {
		t.Fatalf("user tokens = %+v", l)
	}
	if l := cfg.UserBudget.UserCost; l == nil || *l != (auth.BudgetLimit{N: 1_500_000, Period: "1h", Soft: 0.8}) {
		t.Fatalf("user cost = %+v", l)
	}
	own := auth.BudgetLimit{N: 100, Period: "1h"}
	b := cfg.UserBudgetOf(auth.Budget{UserTokens: &own})
	if b.UserTokens.N != 100 || b.UserCost == nil || b.UserCost.N != 1_500_000 || b.Tokens != nil {
		t.Fatalf("a tenant's budget = %+v", b)
	}
	for _, args := range [][]string{{"--user-token-budget", "600"}, {"--user-cost-budget", "x/24h"}, {"--user-token-budget", "600/1s"}} {
		if _, err := ParseFlags(args, envFrom(nil)); !errors.Is(err, ErrConfig) {
			t.Errorf("%v: %v, want ErrConfig", args, err)
		}
	}
}
