package chat_test

import (
	"context"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/prometheus/client_golang/prometheus"
)

func counterValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestMetrics(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	h := e.host(t, "a1", &fake{scripts: []func(context.Context, llm.Request, func(llm.Delta, error) bool){passLocal()}},
		func(c *chat.Config) { c.Registerer = reg })
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	settled(t, e, "a1")
	if got := counterValue(t, reg, "forever_chat_turns_total", "outcome", "completed"); got != 1 {
		t.Fatalf("completed turns = %v, want 1", got)
	}
	if got := counterValue(t, reg, "forever_chat_tokens_total", "kind", "output"); got <= 0 {
		t.Fatalf("output tokens = %v", got)
	}
}
