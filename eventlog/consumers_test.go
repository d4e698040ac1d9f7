package eventlog_test

import (
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestReadsLeaveNoConsumers: every Read and Follow runs on an ordered
// consumer of its own, and nats-server 2.15 caps a stream at 1,000
// consumers unless the stream sets a limit. A consumer left behind after
// its read lives until its inactivity threshold (the client library's
// 5 minutes), so more than 1,000 reads in 5 minutes failed with
// "maximum consumers limit reached". Each read deletes its consumer.
func TestReadsLeaveNoConsumers(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	appendN(t, lg, 3, 1)
	for i := range 1200 {
		evs, err := lg.Read(t.Context(), eventlog.Filter{Agent: "agent0"}, 0, 0)
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if len(evs) != 3 {
			t.Fatalf("read %d: %d events, want 3", i, len(evs))
		}
	}
}
