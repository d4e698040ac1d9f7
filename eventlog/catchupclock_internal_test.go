package eventlog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestCatchUpClockReportsSlowOnes: a catch-up slower than renewAfter is
// logged with its phases; a quick one, or a follow (no clock), is not.
func TestCatchUpClockReportsSlowOnes(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))

	newCatchUpClock(0).report(logger, "a", 1, 0) // a follow: nil
	quick := newCatchUpClock(10)
	quick.delivered(3)
	quick.report(logger, "a", 1, 10)
	if buf.Len() != 0 {
		t.Fatalf("logged a follow or a quick catch-up: %s", buf.String())
	}

	slow := newCatchUpClock(10)
	slow.start = time.Now().Add(-3 * renewAfter)
	slow.lastRead = time.Second
	slow.delivered(0)
	slow.delivered(5)
	slow.renewed()
	slow.commits = 20 * time.Millisecond
	slow.report(logger, "a,b", 1, 10)
	for _, want := range []string{`msg="catch-up was slow"`, "behind=a,b", "leader_reads=1s", "events=5", "consumer_renewals=1", "commits=20ms"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report %q lacks %q", buf.String(), want)
		}
	}
	if strings.Contains(buf.String(), "first_event=0s") {
		t.Errorf("first_event not set: %s", buf.String())
	}
}
