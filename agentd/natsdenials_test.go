package agentd

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestDenialLogBounded: 20,000 denied publishes in a burst of 2 s are all
// counted and passed to the hook, and logged in a few lines (one a
// denialLogEvery) that say how many were left out; other server lines
// pass through. The burst's clock is the test's: a loaded machine takes
// longer than 2 s to send them.
func TestDenialLogBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	dl, err := newDenialLog(reg)
	if err != nil {
		t.Fatal(err)
	}
	const burst, n = 2 * time.Second, 20000
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	dl.now = func() time.Time {
		clock = clock.Add(burst / n)
		return clock
	}
	var hooked int
	var last Denial
	fn := func(d Denial) { hooked++; last = d }
	dl.hook.Store(&fn)
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, nil))
	acc := "A" + strings.Repeat("B", 55)
	user := "U" + strings.Repeat("C", 55)
	// As nats-server 2.15 writes it: the account's key and name, then the
	// user's key.
	line := fmt.Sprintf(`10.1.2.3:54321 - cid:9 - "v1.55.0:go:probe" - %q - Publish Violation - Subject "forever.evt.bot"`, acc+"/acme/jwt:"+user)
	for range n {
		if !dl.take(l, line) {
			t.Fatal("a publish violation was not taken as a denial")
		}
	}
	if dl.take(l, "JetStream cluster new stream leader") {
		t.Fatal("an ordinary line was taken as a denial")
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if want := int(burst / denialLogEvery); len(lines) != want {
		t.Fatalf("%d log lines for one burst of denials of %v, want %d:\n%s", len(lines), burst, want, buf.String())
	}
	left := 0
	for _, ln := range lines {
		var k int
		if _, err := fmt.Sscanf(ln[strings.Index(ln, "more_since_last="):], "more_since_last=%d", &k); err != nil {
			t.Fatalf("line %q: %v", ln, err)
		}
		left += k
	}
	if left+len(lines) > n || left+len(lines) < n-int(denialLogEvery/(burst/n)) {
		t.Fatalf("the lines say %d left out of %d denials, %d logged", left, n, len(lines))
	}
	var m dto.Metric
	dl.count.WithLabelValues("publish").Write(&m)
	if got := m.GetCounter().GetValue(); got != n {
		t.Fatalf("counted %v denials", got)
	}
	if hooked != n || last.Kind != "publish" || last.Account != acc || last.User != user || last.From != "10.1.2.3:54321" {
		t.Fatalf("hook: %d calls, last %+v", hooked, last)
	}
}

// TestRouteConnectErrorIsAWarning: the server's line about a route peer it
// cannot reach (a dead or not yet started node) or whose connection reset
// under a write (a peer that stopped) is a warning; a client connection's
// reset and other error lines stay errors.
func TestRouteConnectErrorIsAWarning(t *testing.T) {
	dl, err := newDenialLog(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	s := &serverLogger{l: slog.New(slog.NewTextHandler(&buf, nil)), denials: dl}
	s.Errorf("Error trying to connect to route (attempt %v): %v", 1, "dial tcp 127.0.0.1:6223: connect: connection refused")
	s.Errorf("%s - rid:%d - Error flushing: %v", "127.0.0.1:41446", 17, "writev tcp 127.0.0.1:30925->127.0.0.1:41446: writev: connection reset by peer")
	s.Errorf("%s - cid:%d - Error flushing: %v", "127.0.0.1:41447", 9, "writev: connection reset by peer")
	s.Errorf("JetStream failed to store a msg on stream %q", "FOREVER_EVENTS")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{"level=WARN", "level=WARN", "level=ERROR", "level=ERROR"}
	if len(lines) != len(want) {
		t.Fatalf("logged:\n%s\nwant %d lines", buf.String(), len(want))
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d %q, want %s", i, lines[i], w)
		}
	}
}
