package auth

import (
	"errors"
	"strconv"
	"testing"
)

func TestParseBudgetLimit(t *testing.T) {
	tokens := func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }
	for _, tc := range []struct {
		in   string
		want BudgetLimit
		bad  bool
	}{
		{in: "1000000/24h", want: BudgetLimit{N: 1000000, Period: "24h"}},
		{in: "600/1h30m/0.8", want: BudgetLimit{N: 600, Period: "1h30m", Soft: 0.8}},
		{in: "0/24h", want: BudgetLimit{Period: "24h"}},
		{in: "600", bad: true},
		{in: "600/10s", bad: true},
		{in: "600/day", bad: true},
		{in: "-1/24h", bad: true},
		{in: "x/24h", bad: true},
		{in: "600/24h/1.5", bad: true},
		{in: "600/24h/0.5/1", bad: true},
	} {
		got, err := ParseBudgetLimit(tc.in, tokens)
		if tc.bad {
			if !errors.Is(err, ErrInvalidBudget) {
				t.Errorf("%q: %+v, %v; want ErrInvalidBudget", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

// TestBudgetMerge: a limit set replaces the stored one, 0 removes it, and
// one left out stays.
func TestBudgetMerge(t *testing.T) {
	b := Budget{Tokens: &BudgetLimit{N: 600, Period: "24h"}, UserCost: &BudgetLimit{N: 1_000_000, Period: "24h"}}
	got := b.Merge(Budget{Tokens: &BudgetLimit{N: 900, Period: "1h"}, UserCost: &BudgetLimit{Period: "24h"}, Cost: &BudgetLimit{N: 5, Period: "24h"}})
	if got.Tokens == nil || *got.Tokens != (BudgetLimit{N: 900, Period: "1h"}) || got.UserCost != nil || got.Cost == nil || got.UserTokens != nil {
		t.Fatalf("merged = %+v", got)
	}
	if b.Tokens.N != 600 {
		t.Fatal("Merge changed its receiver's limits")
	}
	if !(Budget{}).Merge(Budget{Tokens: &BudgetLimit{Period: "24h"}}).IsZero() {
		t.Fatal("a 0 limit over none sets one")
	}
	for _, bad := range []Budget{{Tokens: &BudgetLimit{N: -1, Period: "24h"}}, {Cost: &BudgetLimit{N: 1, Period: "1s"}}, {UserTokens: &BudgetLimit{N: 1, Period: "24h", Soft: 2}}} {
		if err := bad.Validate(); !errors.Is(err, ErrInvalidBudget) {
			t.Errorf("Validate(%+v) = %v", bad, err)
		}
	}
}
