package chat_test

import (
	"context"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
)

// TestRecoveredUsageEqualsUninterrupted: usage is the sum of every provider
// call of a turn, recovered or not. A turn on the local model killed at
// each point (mid-stream, before and while its tools run, after a step,
// after the answer streamed) and recovered by a new incarnation records
// the same usage as the same turn run without a crash. (Issue 26: a story
// recovered mid-stream recorded 217 output tokens where the uninterrupted
// one recorded 303.)
func TestRecoveredUsageEqualsUninterrupted(t *testing.T) {
	const story = "tell me a story"
	cases := []struct {
		name   string
		prompt string
		// cut is the number of text deltas before the crash (mid-stream),
		// or -1 for a crash at point.
		cut   int
		point string
		skip  int
	}{
		{name: "story cut mid-stream", prompt: story, cut: 40},
		{name: "story cut at its first delta", prompt: story, cut: 1},
		{name: "answer streamed, before its records", prompt: story, cut: -1, point: "ended"},
		{name: "before the first tool runs", prompt: twoTools, cut: -1, point: "tools-begin"},
		{name: "after the first result is recorded", prompt: twoTools, cut: -1, point: "tool-recorded"},
		{name: "after the first step", prompt: twoTools, cut: -1, point: "step-done"},
		{name: "after the second result is recorded", prompt: twoTools, cut: -1, point: "tool-recorded", skip: 1},
		{name: "before the second tool runs", prompt: twoTools, cut: -1, point: "tools-begin", skip: 1},
		{name: "after the second step", prompt: twoTools, cut: -1, point: "step-done", skip: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			local := llm.NewLocal(llm.LocalConfig{Rate: -1})

			// The turn without a crash, on an agent of its own.
			e := newEnv(t)
			fx := newSideEffects()
			tools := withTools(t, fx.tool(t, "safe", chat.Idempotent), fx.tool(t, "risky", chat.Unsafe))
			h := e.host(t, "clean", local, tools)
			if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: tc.prompt}); err != nil {
				t.Fatal(err)
			}
			h.r.Wait()
			settled(t, e, "clean")
			want, err := e.store.Usage("clean")
			if err != nil || want.Turns != 1 || want.Output == 0 {
				t.Fatalf("usage of the uninterrupted turn = %+v, %v", want, err)
			}

			// The same turn, killed and recovered.
			fx2 := newSideEffects()
			tools2 := withTools(t, fx2.tool(t, "safe", chat.Idempotent), fx2.tool(t, "risky", chat.Unsafe))
			reached := make(chan struct{}, 1)
			var p llm.Provider = local
			if tc.cut >= 0 {
				p = &fake{scripts: []script{cutAfter(tc.cut, reached)}}
			}
			h = e.host(t, "a1", p, tools2)
			if tc.cut < 0 {
				seen := 0
				chat.StopAt(h.a, func(ctx context.Context, point string) error {
					if point != tc.point {
						return nil
					}
					if seen++; seen <= tc.skip {
						return nil
					}
					reached <- struct{}{}
					<-ctx.Done()
					return ctx.Err()
				})
			}
			if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: tc.prompt}); err != nil {
				t.Fatal(err)
			}
			wait(t, reached)
			h.r.Close()
			recoverHost(t, e, "a1", local, tools2)
			if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnCompleted {
				t.Fatalf("recovered turn = %s %q", tr.Status, tr.Error)
			}
			settled(t, e, "a1")
			got, err := e.store.Usage("a1")
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("usage after recovery = %+v, uninterrupted = %+v", got, want)
			}
		})
	}
}
