package eventlog_test

import (
	"context"
	"strings"
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

// TestMaxConsumers: Config.MaxConsumers caps each stream's consumers, so
// an operator can raise nats-server's default of 1,000 concurrent follows;
// a follow over the cap ends with the server's error, and reopening with
// another cap updates the streams in place.
func TestMaxConsumers(t *testing.T) {
	lg, s := eventlogtest.Open(t, eventlog.Config{MaxConsumers: 2})
	appendN(t, lg, 3, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	started := make(chan error, 3)
	for range 3 {
		go func() {
			for _, err := range lg.Follow(ctx, eventlog.Filter{Agent: "agent0"}, 0) {
				started <- err
				if err != nil {
					return
				}
				<-ctx.Done()
				return
			}
		}()
	}
	var refused int
	for range 3 {
		if err := <-started; err != nil {
			if !strings.Contains(err.Error(), "maximum consumers") {
				t.Fatalf("follow over the cap: %v", err)
			}
			refused++
		}
	}
	if refused != 1 {
		t.Fatalf("%d of 3 follows refused with a cap of 2, want 1", refused)
	}
	cancel()
	again := eventlogtest.OpenOn(t, s, eventlog.Config{MaxConsumers: 5000})
	info, err := eventlog.StreamConfig(again, eventlog.DefaultChunksStream)
	if err != nil {
		t.Fatal(err)
	}
	if info.MaxConsumers != 5000 {
		t.Fatalf("chunks stream MaxConsumers %d after reopening with 5000", info.MaxConsumers)
	}
}
