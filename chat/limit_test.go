package chat_test

import (
	"context"
	"errors"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
)

// TestTurnLimiter: past the node's bound a new turn is refused at once
// with ErrOverloaded (nothing appended); a recovered turn is admitted
// anyway; slots come back when turns end.
func TestTurnLimiter(t *testing.T) {
	e := newEnv(t)
	lim := chat.NewTurnLimiter(1)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	blocking := &fake{scripts: []script{func(ctx context.Context, req llm.Request, yield func(llm.Delta, error) bool) {
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			yield(llm.Delta{}, context.Cause(ctx))
			return
		}
		passLocal()(ctx, req, yield)
	}}}
	withLimit := func(c *chat.Config) { c.Turns = lim }
	h1 := e.host(t, "a1", blocking, withLimit)
	h2 := e.host(t, "a2", llm.NewLocal(llm.LocalConfig{Rate: -1}), withLimit)
	if _, err := h1.a.Send(t.Context(), chat.SendRequest{Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	wait(t, started)
	if _, err := h2.a.Send(t.Context(), chat.SendRequest{Text: "me too"}); !errors.Is(err, chat.ErrOverloaded) {
		t.Fatalf("second turn past the bound = %v, want ErrOverloaded", err)
	}
	if msgs := settled(t, e, "a2"); len(msgs) != 0 {
		t.Fatalf("a refused turn appended %d messages", len(msgs))
	}
	close(release)
	h1.r.Wait()
	if n := lim.Running(); n != 0 {
		t.Fatalf("%d turns counted after the turn ended", n)
	}
	if _, err := h2.a.Send(t.Context(), chat.SendRequest{Text: "me too"}); err != nil {
		t.Fatal(err)
	}
	h2.r.Wait()
	if n := lim.Running(); n != 0 {
		t.Fatalf("%d turns counted at the end", n)
	}
}
