package main

import "testing"

// tenant create --model-weight sets the quota's model weight; a weight
// that is not a whole number from 0 to 1000 is a usage error.
func TestTenantModelWeightFlag(t *testing.T) {
	getenv := func(string) string { return "" }
	fs, o := tenantFlagSet("tenant create", getenv)
	if _, err := parseInterleaved(fs, []string{"acme", "--model-weight", "3"}); err != nil {
		t.Fatal(err)
	}
	if got := o.q.ModelWeight; got != 3 {
		t.Fatalf("ModelWeight %d, want 3", got)
	}
	for _, bad := range []string{"-1", "1001", "x", "1.5"} {
		fs, _ := tenantFlagSet("tenant create", getenv)
		if _, err := parseInterleaved(fs, []string{"acme", "--model-weight", bad}); err == nil {
			t.Errorf("--model-weight %s accepted", bad)
		}
	}
}
