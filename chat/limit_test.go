package chat_test

import (
	"context"
	"errors"
	"testing"
	"time"

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

// TestSendRightAfterTheEnd: a Send that arrives once the previous turn's
// finish chunk is durable, while that turn still records its end, waits
// for it instead of failing with ErrTurnActive (an AI SDK client sends the
// next message the moment the stream ends).
func TestSendRightAfterTheEnd(t *testing.T) {
	e := newEnv(t)
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), nil)
	ended, goOn := make(chan struct{}), make(chan struct{})
	chat.StopAt(h.a, func(ctx context.Context, point string) error {
		if point == "ended" {
			select {
			case ended <- struct{}{}:
				<-goOn
			default:
			}
		}
		return nil
	})
	first := make(chan error, 1)
	go func() {
		_, err := h.a.Send(t.Context(), chat.SendRequest{Text: "hi"})
		first <- err
	}()
	<-ended
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	next := make(chan error, 1)
	go func() {
		_, err := h.a.Send(t.Context(), chat.SendRequest{Text: "again"})
		next <- err
	}()
	select {
	case err := <-next:
		t.Fatalf("Send while the last turn records its end = %v, want it to wait", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(goOn)
	if err := <-next; err != nil {
		t.Fatalf("Send after the last turn ended = %v", err)
	}
	h.r.Wait()
	if msgs := settled(t, e, "a1"); len(msgs) != 4 {
		t.Fatalf("%d messages, want 4", len(msgs))
	}
}

// TestTurnLimiterSub: the turns of Subs of one limiter are bounded by it
// together (a node's --max-turns across its tenants), each Sub also by its
// own bound, refused with its own error; a refused turn holds no slot.
func TestTurnLimiterSub(t *testing.T) {
	node := chat.NewTurnLimiter(2)
	errQuota := errors.New("over the tenant's quota")
	a, b := node.Sub(0, nil), node.Sub(1, errQuota)
	if err := a.Acquire(false); err != nil {
		t.Fatal(err)
	}
	if err := b.Acquire(false); err != nil {
		t.Fatal(err)
	}
	if err := b.Acquire(false); !errors.Is(err, errQuota) {
		t.Fatalf("past the sub's own bound: %v", err)
	}
	if err := a.Acquire(false); !errors.Is(err, chat.ErrOverloaded) {
		t.Fatalf("past the node's bound: %v", err)
	}
	if node.Running() != 2 || a.Running() != 1 || b.Running() != 1 {
		t.Fatalf("running: node %d a %d b %d", node.Running(), a.Running(), b.Running())
	}
	if err := a.Acquire(true); err != nil || node.Running() != 3 {
		t.Fatalf("a recovered turn: %v, node %d", err, node.Running())
	}
	a.Release()
	a.Release()
	b.Release()
	if node.Running() != 0 || a.Running() != 0 || b.Running() != 0 {
		t.Fatalf("after release: node %d a %d b %d", node.Running(), a.Running(), b.Running())
	}
}
