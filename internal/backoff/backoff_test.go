package backoff

import (
	"testing"
	"time"
)

func TestExp(t *testing.T) {
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i, w := range want {
		if got := Exp(time.Second, 5*time.Second, i+1); got != w {
			t.Errorf("Exp(n=%d) = %v, want %v", i+1, got, w)
		}
	}
}
