package auth_test

import (
	"errors"
	"testing"

	"github.com/forever-agents/forever/auth"
)

// A tenant's model weight: 0 is 1, a weight from 1 to MaxModelWeight is
// kept through Resolve, anything else is refused naming the flag.
func TestQuotaModelWeight(t *testing.T) {
	for _, tc := range []struct {
		weight, want int
		ok           bool
	}{
		{0, 1, true}, {1, 1, true}, {3, 3, true}, {auth.MaxModelWeight, auth.MaxModelWeight, true},
		{-1, 0, false}, {auth.MaxModelWeight + 1, 0, false},
	} {
		q := auth.Quota{ModelWeight: tc.weight}
		err := q.Validate()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, auth.ErrInvalidQuota)) {
			t.Fatalf("weight %d: Validate = %v, want ok %v", tc.weight, err, tc.ok)
		}
		if tc.ok {
			if got := q.Resolve(auth.Quota{Turns: 5}).Weight(); got != tc.want {
				t.Fatalf("weight %d resolved to %d, want %d", tc.weight, got, tc.want)
			}
		}
	}
}
