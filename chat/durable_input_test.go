package chat_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
)

// TestToolInputDurableBeforeToolRuns: a server tool's side effect never
// runs before the chunk that shows its call (tool-input-available) is
// stored, so a client, and a recovery, always see a call whose effect may
// have happened. The chunk batcher here waits 30 ms before each batch, so a
// turn that ran its tools before making the model's output durable would
// have each tool find its input chunk missing from the log.
func TestToolInputDurableBeforeToolRuns(t *testing.T) {
	e := newEnv(t)
	b := e.lg.NewBatcher(eventlog.BatcherConfig{MaxDelay: 30 * time.Millisecond})
	bctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(bctx) }()
	t.Cleanup(func() { stop(); <-done })

	var mu sync.Mutex
	var missing []string
	ran := 0
	check := func(ctx context.Context, in echoIn) (echoOut, error) {
		call, ok := chat.ToolCallFrom(ctx)
		if !ok {
			return echoOut{}, fmt.Errorf("no tool call in ctx")
		}
		evs, err := e.lg.Read(ctx, eventlog.Filter{Agent: call.Agent, Chunks: true}, 0, 0)
		if err != nil {
			return echoOut{}, err
		}
		var a chunk.Assembler
		found := false
		for _, ev := range evs {
			// Chunks, not Add: under -pack a record holds several chunks.
			cs, err := a.Chunks(ev.Type, ev.Data)
			if err != nil {
				return echoOut{}, err
			}
			for _, c := range cs {
				if c.Type == chunk.ToolInput && c.ToolCallID == call.CallID {
					found = true
				}
			}
		}
		mu.Lock()
		ran++
		if !found {
			missing = append(missing, call.ToolName)
		}
		mu.Unlock()
		return echoOut{Echo: in.Text}, nil
	}
	var tools []*chat.Tool
	for _, name := range []string{"safe", "risky"} {
		safety := chat.Idempotent
		if name == "risky" {
			safety = chat.Unsafe
		}
		tool, err := chat.NewTool(name, "echoes its text", check, chat.WithSafety(safety))
		if err != nil {
			t.Fatal(err)
		}
		tools = append(tools, tool)
	}
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), func(c *chat.Config) {
		withTools(t, tools...)(c)
		c.Batcher = b
	})
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: twoTools}); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnCompleted {
		t.Fatalf("turn = %s %q", tr.Status, tr.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	if ran != 2 {
		t.Fatalf("tools ran %d times, want 2", ran)
	}
	if len(missing) > 0 {
		t.Fatalf("tools %v ran before their tool-input-available chunk was stored", missing)
	}
}
