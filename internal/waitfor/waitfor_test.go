package waitfor

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB that records Fatalf instead of ending the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

// A condition that holds already costs one call and no wait.
func TestHoldsAtOnce(t *testing.T) {
	calls := 0
	True(t, "nothing", func() bool { calls++; return true })
	NoError(t, func() error { calls++; return nil })
	if calls != 2 {
		t.Fatalf("%d calls, want 2", calls)
	}
}

// A condition that comes to hold ends the wait on the check after it does.
func TestWaitsUntilItHolds(t *testing.T) {
	calls := 0
	True(t, "three calls", func() bool { calls++; return calls == 3 })
	if calls != 3 {
		t.Fatalf("%d calls, want 3", calls)
	}
}

// A condition that never holds fails with its description or its last
// error, and not before the bound has passed.
func TestNeverHolds(t *testing.T) {
	const d = 50 * time.Millisecond
	r := &recorder{TB: t}
	start := time.Now()
	n := 0
	Within(r, d, func() error { n++; return fmt.Errorf("seen %d", n) })
	if waited := time.Since(start); waited < d {
		t.Errorf("failed after %v, before the bound %v", waited, d)
	}
	if want := fmt.Sprintf("seen %d", n); !strings.HasSuffix(r.failed, want) {
		t.Errorf("failure %q does not carry the last error %q", r.failed, want)
	}
	r = &recorder{TB: t}
	trueWithin(r, d, "the moon to turn blue", func() bool { return false })
	if !strings.HasSuffix(r.failed, ": the moon to turn blue") {
		t.Errorf("failure %q does not say what was awaited", r.failed)
	}
}
