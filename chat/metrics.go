package chat

import (
	"github.com/forever-agents/forever/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the chat package's Prometheus metrics, shared by every Agent
// on one Registerer. Labels are small fixed sets; never agent ids. Chunks
// are counted by eventlog (forever_eventlog_events_appended_total).
type metrics struct {
	turns      *prometheus.CounterVec // outcome: completed, failed, interrupted
	recoveries *prometheus.CounterVec // path: finalize, retry, continue, persist, discard, abandon
	tokens     *prometheus.CounterVec // kind: input, output
	toolCalls  *prometheus.CounterVec // outcome: ok, error, maybe_executed, interrupted
	steps      prometheus.Counter
	// subagentCalls: started, refused, and each end (completed, failed,
	// interrupted, cancelled).
	subagentCalls *prometheus.CounterVec
	// chunkRefs counts chunks stored holding a payload by reference.
	chunkRefs prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forever_chat_turns_total",
			Help: "Chat turns ended, by outcome.",
		}, []string{"outcome"}),
		recoveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forever_chat_turn_recoveries_total",
			Help: "Interrupted chat turns recovered, by what recovery did.",
		}, []string{"path"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forever_chat_tokens_total",
			Help: "Model tokens used by completed turns, by kind.",
		}, []string{"kind"}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forever_chat_tool_calls_total",
			Help: "Server tool calls of chat turns, by outcome (a recorded result replayed after a crash counts again).",
		}, []string{"outcome"}),
		steps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_chat_steps_total",
			Help: "Model calls (steps) of chat turns started.",
		}),
		subagentCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forever_chat_subagent_calls_total",
			Help: "Sub-agent calls of chat turns: started, refused, and ended by outcome (completed, failed, interrupted, cancelled).",
		}, []string{"outcome"}),
		chunkRefs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_chat_chunk_refs_total",
			Help: "Chunks stored holding a payload over the blob threshold by reference (a tool input or output, a data part) instead of its bytes.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.turns, err = promreg.Register(reg, m.turns); err != nil {
		return nil, err
	}
	if m.recoveries, err = promreg.Register(reg, m.recoveries); err != nil {
		return nil, err
	}
	// Every path from 0, so increase() counts a first recovery.
	for _, p := range []string{"finalize", "retry", "persist", "discard", "continue", "abandon"} {
		m.recoveries.WithLabelValues(p)
	}
	if m.tokens, err = promreg.Register(reg, m.tokens); err != nil {
		return nil, err
	}
	if m.toolCalls, err = promreg.Register(reg, m.toolCalls); err != nil {
		return nil, err
	}
	if m.steps, err = promreg.Register(reg, m.steps); err != nil {
		return nil, err
	}
	if m.subagentCalls, err = promreg.Register(reg, m.subagentCalls); err != nil {
		return nil, err
	}
	if m.chunkRefs, err = promreg.Register(reg, m.chunkRefs); err != nil {
		return nil, err
	}
	return m, nil
}
