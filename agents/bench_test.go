package agents_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/forever-agents/forever/agents"
	"github.com/forever-agents/forever/eventlog"
)

// BenchmarkApply applies the events of chat turns (seven each, two of them
// changing the row) over 64 agents to the agents view in memory.
func BenchmarkApply(b *testing.B) {
	var evs []eventlog.Event
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 1000 {
		agent := fmt.Sprintf("a%d", i%64)
		for _, typ := range []string{"fiber.started", "message.appended", "turn.started", "message.appended", "usage.recorded", "turn.completed", "fiber.completed"} {
			evs = append(evs, eventlog.Event{Agent: agent, Type: typ, Time: at, Data: json.RawMessage(fmt.Sprintf(`{"id":"f%d","finishReason":"stop"}`, i))})
		}
	}
	b.ResetTimer()
	for range b.N {
		if _, err := eventlog.ApplyInMemory(agents.Projection(), evs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
}
