package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/verify"
)

// fakeVerify writes a script that stands for agentd verify: it fails with
// the message of its first len(fails) runs, then succeeds. It counts its
// runs in a file beside it.
func fakeVerify(t *testing.T, fails ...string) (bin string, runs func() int) {
	t.Helper()
	dir := t.TempDir()
	count := filepath.Join(dir, "runs")
	var cases strings.Builder
	for i, msg := range fails {
		cases.WriteString("  " + strconv.Itoa(i+1) + ") echo '" + msg + "'; exit 1 ;;\n")
	}
	script := "#!/bin/sh\nn=$(($(cat " + count + " 2>/dev/null || echo 0) + 1))\necho $n > " + count +
		"\ncase $n in\n" + cases.String() + "esac\necho 'ok: 0 agents'\n"
	bin = filepath.Join(dir, "agentd")
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, func() int {
		b, err := os.ReadFile(count)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// TestRunVerifyAgainWhileUnsettled: a verify that failed only because the
// log was purged during every read is run again until it passes; any other
// failure, or one past the quiet wait, is reported at once.
func TestRunVerifyAgainWhileUnsettled(t *testing.T) {
	ctx := context.Background()
	unsettled := "agentd verify: tenant chaos: " + verify.ErrUnsettled.Error() + ": 514 events removed during the read"

	t.Run("settles", func(t *testing.T) {
		bin, runs := fakeVerify(t, unsettled, unsettled)
		failed, n := runVerify(ctx, bin, []string{"verify"}, time.Minute, time.Millisecond)
		if failed != "" || n != 3 || runs() != 3 {
			t.Fatalf("failed %q after %d runs (script ran %d times), want a pass on the 3rd", failed, n, runs())
		}
	})
	t.Run("violation", func(t *testing.T) {
		bin, runs := fakeVerify(t, "violation: fiber started twice", unsettled)
		failed, n := runVerify(ctx, bin, []string{"verify"}, time.Minute, time.Millisecond)
		if !strings.Contains(failed, "started twice") || n != 1 || runs() != 1 {
			t.Fatalf("failed %q after %d runs, want the violation after 1", failed, n)
		}
	})
	t.Run("violation beside an unsettled log", func(t *testing.T) {
		bin, runs := fakeVerify(t, "violation: fiber started twice\n"+unsettled)
		failed, n := runVerify(ctx, bin, []string{"verify"}, time.Minute, time.Millisecond)
		if !strings.Contains(failed, "started twice") || n != 1 || runs() != 1 {
			t.Fatalf("failed %q after %d runs, want the violation after 1", failed, n)
		}
	})
	t.Run("never quiet", func(t *testing.T) {
		bin, _ := fakeVerify(t, unsettled, unsettled)
		failed, n := runVerify(ctx, bin, []string{"verify"}, 0, time.Millisecond)
		if !strings.Contains(failed, verify.ErrUnsettled.Error()) || n != 1 {
			t.Fatalf("failed %q after %d runs, want the unsettled failure after 1 (no quiet wait)", failed, n)
		}
	})
}
