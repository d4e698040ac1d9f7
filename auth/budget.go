package auth

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/forever-agents/forever/internal/apierror"
)

// ErrInvalidBudget is returned by Budget.Validate and ParseBudgetLimit.
var ErrInvalidBudget error = apierror.Declare("auth", apierror.BadRequest, "invalid budget")

// Budget is a tenant's spend limits, in its record: on the tokens and the
// cost of the model calls of all its agents together (Tokens, Cost), and
// of each of its users' agents together (UserTokens, UserCost: a limit
// every user of the tenant has, the agent's user from its meta). A nil
// field is no limit. tenant create sets them (--token-budget,
// --cost-budget, --user-token-budget, --user-cost-budget); each field a
// create sets replaces the stored one, and a limit of 0 removes it.
type Budget struct {
	Tokens     *BudgetLimit `json:"tokens,omitempty"`
	Cost       *BudgetLimit `json:"cost,omitempty"`
	UserTokens *BudgetLimit `json:"userTokens,omitempty"`
	UserCost   *BudgetLimit `json:"userCost,omitempty"`
}

// BudgetLimit is a limit per period: N tokens, or N micro-dollars for a
// cost, per Period (a Go duration of at least a minute; periods are
// windows aligned to the Unix epoch: 24h resets at 00:00 UTC). Soft, when
// in (0, 1), is the fraction at which a turn parks for an approval; 0 is
// no soft stop.
type BudgetLimit struct {
	N      int64   `json:"n"`
	Period string  `json:"period"`
	Soft   float64 `json:"soft,omitempty"`
}

// Merge returns b with each limit o sets replacing b's; a limit of 0 in
// o removes b's.
func (b Budget) Merge(o Budget) Budget {
	set := func(dst **BudgetLimit, src *BudgetLimit) {
		switch {
		case src == nil:
		case src.N == 0:
			*dst = nil
		default:
			v := *src
			*dst = &v
		}
	}
	set(&b.Tokens, o.Tokens)
	set(&b.Cost, o.Cost)
	set(&b.UserTokens, o.UserTokens)
	set(&b.UserCost, o.UserCost)
	return b
}

// IsZero reports whether b sets no limit.
func (b Budget) IsZero() bool {
	return b.Tokens == nil && b.Cost == nil && b.UserTokens == nil && b.UserCost == nil
}

// Validate refuses a negative limit, a period shorter than a minute and a
// soft fraction outside [0, 1]. The error names the flag.
func (b Budget) Validate() error {
	for _, f := range []struct {
		flag string
		l    *BudgetLimit
	}{{"token-budget", b.Tokens}, {"cost-budget", b.Cost}, {"user-token-budget", b.UserTokens}, {"user-cost-budget", b.UserCost}} {
		if f.l == nil {
			continue
		}
		if f.l.N < 0 {
			return fmt.Errorf("%w: --%s: a limit is not negative, got %d", ErrInvalidBudget, f.flag, f.l.N)
		}
		if d, err := time.ParseDuration(f.l.Period); err != nil || d < time.Minute {
			return fmt.Errorf("%w: --%s: the period must be a duration of at least 1m, like 24h, got %q", ErrInvalidBudget, f.flag, f.l.Period)
		}
		if f.l.Soft < 0 || f.l.Soft > 1 {
			return fmt.Errorf("%w: --%s: the soft fraction must be in [0, 1], got %g", ErrInvalidBudget, f.flag, f.l.Soft)
		}
	}
	return nil
}

// ParseBudgetLimit reads a limit as tenant create's budget flags take it:
// "<amount>/<period>[/<soft>]", like "1000000/24h" or "5.00/24h/0.8".
// amount parses the amount (tokens, or dollars to micro-dollars).
func ParseBudgetLimit(s string, amount func(string) (int64, error)) (BudgetLimit, error) {
	parts := strings.Split(strings.TrimSpace(s), "/")
	if len(parts) < 2 || len(parts) > 3 {
		return BudgetLimit{}, fmt.Errorf("%w: %q: give <amount>/<period>[/<soft>], like 1000000/24h", ErrInvalidBudget, s)
	}
	n, err := amount(parts[0])
	if err != nil || n < 0 {
		return BudgetLimit{}, fmt.Errorf("%w: %q: the amount %q is not a limit", ErrInvalidBudget, s, parts[0])
	}
	l := BudgetLimit{N: n, Period: parts[1]}
	if d, err := time.ParseDuration(l.Period); err != nil || d < time.Minute {
		return BudgetLimit{}, fmt.Errorf("%w: %q: the period must be a duration of at least 1m, like 24h", ErrInvalidBudget, s)
	}
	if len(parts) == 3 {
		f, err := strconv.ParseFloat(parts[2], 64)
		if err != nil || f < 0 || f > 1 {
			return BudgetLimit{}, fmt.Errorf("%w: %q: the soft fraction must be in [0, 1], like 0.8", ErrInvalidBudget, s)
		}
		l.Soft = f
	}
	return l, nil
}
