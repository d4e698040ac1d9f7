package host_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/forever-agents/forever/keepalive"
)

// TestHostCompactsIdleAgents: an agent that goes idle past
// Config.CompactIdleEvents is compacted by its owner (its log is one
// snapshot), and it works on afterwards: a new fiber's appends follow the
// snapshot under the same fence.
func TestHostCompactsIdleAgents(t *testing.T) {
	cfg := agentdtest.Config(t)
	cfg.CompactIdleEvents = 5
	_, h, nc, _ := startHost(t, cfg, host.Config{IdleTimeout: 100 * time.Millisecond}, make(chan keepalive.Schedule, 1))
	lg, err := eventlog.Open(t.Context(), eventlog.Config{Conn: nc, Bind: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	events := func() []eventlog.Event {
		evs, err := lg.Read(t.Context(), eventlog.Filter{Agent: "steps:c"}, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	var prev eventlog.Seq
	compacted := func() {
		t.Helper()
		var evs []eventlog.Event
		waitfor.NoError(t, func() error {
			evs = events()
			if len(evs) == 1 && evs[0].Type == eventlog.TypeSnapshot && evs[0].Seq > prev {
				return nil
			}
			return fmt.Errorf("the agent to be compacted: %d events, active %v", len(evs), h.Active("steps:c"))
		})
		var s eventlog.Snapshot
		if err := evs[0].Decode(&s); err != nil {
			t.Fatal(err)
		}
		// 10 steps: at least an effect and an op.completed each.
		if s.Upto < prev+20 {
			t.Fatalf("the snapshot covers up to %d, the previous one was at %d", s.Upto, prev)
		}
		prev = evs[0].Seq
	}
	for round := range 2 {
		if _, code := request(t, nc, "steps:c", "start", []byte(`{"steps":10,"delayMs":0}`)); code != "" {
			t.Fatalf("round %d: start: %s", round, code)
		}
		compacted()
	}
	if body, _ := request(t, nc, "steps:c", "fibers", nil); string(body) != "[]" {
		t.Fatalf("fibers after compaction: %s", body)
	}
}
