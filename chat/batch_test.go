package chat_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
)

// inputs records the user messages of every model call of the provider it
// wraps.
type inputs struct {
	llm.Provider
	mu    sync.Mutex
	calls [][]string
}

func (p *inputs) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Delta, error] {
	var users []string
	for _, m := range req.Messages {
		if m.Role == llm.RoleUser {
			users = append(users, m.PlainText())
		}
	}
	p.mu.Lock()
	p.calls = append(p.calls, users)
	p.mu.Unlock()
	return p.Provider.Stream(ctx, req)
}

func (p *inputs) last() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.calls) == 0 {
		return nil
	}
	return p.calls[len(p.calls)-1]
}

func textMsg(id, text string) *chat.Message {
	return &chat.Message{ID: id, Parts: []chat.Part{{Type: chat.PartText, Text: text}}}
}

// conversation is the agent's messages as role:text, answers as "answer".
func conversation(t *testing.T, e *env, agent string) []string {
	t.Helper()
	var out []string
	for _, m := range settled(t, e, agent) {
		if m.Role == chat.RoleUser {
			out = append(out, m.Text())
		} else {
			out = append(out, "answer")
		}
	}
	return out
}

// TestMultitaskMerge: messages sent with "merge" while a turn runs are
// acknowledged at once, all with the same next turn, and answered
// together in that one turn, whose model input holds them in the order
// they came; a retried command gets the batch's turn back; the queue is
// empty after; with no turn running, "merge" starts a turn at once.
func TestMultitaskMerge(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	p := &inputs{Provider: g}
	h := e.host(t, "a1", p, nil)
	first, err := h.a.Send(t.Context(), chat.SendRequest{Text: "m0"})
	if err != nil {
		t.Fatal(err)
	}
	<-g.streaming
	var turns []chat.Turn
	for i := 1; i <= 3; i++ {
		turn, err := h.a.Send(t.Context(), chat.SendRequest{Message: textMsg(fmt.Sprintf("q%d", i), fmt.Sprintf("m%d", i)), Multitask: chat.MultitaskMerge})
		if err != nil {
			t.Fatal(err)
		}
		turns = append(turns, turn)
	}
	if turns[0] == (chat.Turn{}) || turns[0].RequestID == first.RequestID || turns[1] != turns[0] || turns[2] != turns[0] {
		t.Fatalf("merged replies %+v, want one new turn for all", turns)
	}
	again, err := h.a.Send(t.Context(), chat.SendRequest{Message: textMsg("q2", "m2"), Multitask: chat.MultitaskMerge})
	if err != nil || again != turns[0] {
		t.Fatalf("retried merge: %+v %v, want %+v", again, err, turns[0])
	}
	if q, err := e.store.Queue("a1"); err != nil || len(q) != 3 {
		t.Fatalf("queue %d %v", len(q), err)
	}
	close(g.release)
	h.r.Wait()
	want := []string{"m0", "answer", "m1", "m2", "m3", "answer"}
	if got := conversation(t, e, "a1"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("messages\n got %q\nwant %q", got, want)
	}
	if in := p.last(); fmt.Sprint(in) != fmt.Sprint([]string{"m0", "m1", "m2", "m3"}) {
		t.Fatalf("merged turn's model input %q", in)
	}
	cs, text := streamOf(t, e.lg, "a1", turns[0].StreamID)
	if count(cs, chunk.Start) != 1 || count(cs, chunk.Finish) != 1 || text != answer("m3") {
		t.Fatalf("merged stream: %d chunks, text %q", len(cs), text)
	}
	tr, err := e.store.Turn("a1", turns[0].RequestID)
	if err != nil || tr.Status != chat.TurnCompleted || tr.MessageID != "q1" || !slices.Equal(tr.Merged, []string{"q2", "q3"}) {
		t.Fatalf("merged turn %+v %v", tr, err)
	}
	starts := turnStarts(t, e, "a1")
	if len(starts) != 2 {
		t.Fatalf("%d turns, want 2", len(starts))
	}
	for req, k := range starts {
		if k != 1 {
			t.Fatalf("turn %s started %d times", req, k)
		}
	}
	if q, err := e.store.Queue("a1"); err != nil || len(q) != 0 {
		t.Fatalf("queue left %d %v", len(q), err)
	}
	// A copy sent after the batch was answered gets its turn back.
	if again, err := h.a.Send(t.Context(), chat.SendRequest{Message: textMsg("q3", "m3"), Multitask: chat.MultitaskMerge}); err != nil || again.RequestID != turns[0].RequestID {
		t.Fatalf("late copy: %+v %v", again, err)
	}
	// Idle: the message starts its own turn at once.
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "later", Multitask: chat.MultitaskMerge}); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	if got := conversation(t, e, "a1"); len(got) != 8 {
		t.Fatalf("messages %q", got)
	}
	checkClean(t, e.lg)
}

// TestMultitaskDebounce: messages sent with "debounce" to an idle agent
// are queued, and the turn starts only after a quiet window with no new
// message (the request's, else the agent type's): those sent within it
// become one turn. The agent's clock is the test's, so nothing starts
// until the test moves it. A window out of bounds is bad input.
func TestMultitaskDebounce(t *testing.T) {
	e := newEnv(t)
	p := &inputs{Provider: llm.NewLocal(llm.LocalConfig{Rate: -1})}
	clock := &manualClock{now: time.Now()}
	h := e.host(t, "a1", p, func(c *chat.Config) { c.Clock = clock })
	send := func(text string, d time.Duration) chat.Turn {
		t.Helper()
		turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: text, Multitask: chat.MultitaskDebounce, Debounce: d})
		if err != nil {
			t.Fatal(err)
		}
		return turn
	}
	queued := func(n int) {
		t.Helper()
		if q, err := e.store.Queue("a1"); err != nil || len(q) != n {
			t.Fatalf("queue %d %v, want %d", len(q), err, n)
		}
	}
	// The batch's window is its first message's: 30 s.
	first := send("m1", 30*time.Second)
	clock.Advance(20 * time.Second)
	// Each message that joins restarts the quiet window.
	if turn := send("m2", 0); turn != first {
		t.Fatalf("second reply %+v, want %+v", turn, first)
	}
	clock.Advance(20 * time.Second) // 40 s after m1, 20 s after m2
	if turn := send("m3", time.Millisecond); turn != first {
		t.Fatalf("third reply %+v, want %+v", turn, first)
	}
	clock.Advance(29 * time.Second)
	// Not a synchronisation: more than a queue poll passes, to show that
	// nothing starts within the window.
	time.Sleep(500 * time.Millisecond)
	queued(3)
	if n := len(turnStarts(t, e, "a1")); n != 0 {
		t.Fatalf("%d turns started within the window", n)
	}
	for _, d := range []time.Duration{-time.Second, chat.MaxDebounceWindow + time.Second} {
		if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "x", Multitask: chat.MultitaskDebounce, Debounce: d}); !errors.Is(err, chat.ErrMultitask) {
			t.Fatalf("debounce %s: %v, want ErrMultitask", d, err)
		}
	}
	clock.Advance(time.Second)
	waitTurns(t, e, "a1", 1)
	h.r.Wait()
	want := []string{"m1", "m2", "m3", "answer"}
	if got := conversation(t, e, "a1"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("messages\n got %q\nwant %q", got, want)
	}
	if in := p.last(); fmt.Sprint(in) != fmt.Sprint([]string{"m1", "m2", "m3"}) {
		t.Fatalf("debounced turn's model input %q", in)
	}
	if n := len(turnStarts(t, e, "a1")); n != 1 {
		t.Fatalf("%d turns", n)
	}
	queued(0)
	// The agent type's window (DebounceWindow, 400 ms by default).
	send("m4", 0)
	clock.Advance(chat.DefaultDebounceWindow)
	waitTurns(t, e, "a1", 2)
	h.r.Wait()
	if got := conversation(t, e, "a1"); len(got) != 6 {
		t.Fatalf("messages %q", got)
	}
	checkClean(t, e.lg)
}

// waitTurns waits until agent's log holds n turn.started.
func waitTurns(t *testing.T, e *env, agent string, n int) {
	t.Helper()
	for len(turnStarts(t, e, agent)) < n {
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestMultitaskMergeCrash: the process dies while a merged batch waits
// (the running turn streaming), or at each crash point of the batch's
// turn's start (caught up and checked, nothing stored; its turn.started
// with the merged messages stored, Send not returned; every append done,
// the turn not running). The next incarnation answers every acknowledged
// message exactly once: the running turn's, and the batch's in one turn.
func TestMultitaskMergeCrash(t *testing.T) {
	for _, tc := range []struct{ name, point string }{
		{"while the running turn streams", ""},
		{"before the batch's turn is stored", "send-checked"},
		{"once the batch's turn is stored", "send-turn-stored"},
		{"before the batch's turn runs", "send-stored"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			g := newGate()
			h := e.host(t, "a1", g, nil)
			reached := make(chan struct{}, 1)
			if tc.point != "" {
				var seen atomic.Int32
				chat.StopAt(h.a, func(ctx context.Context, point string) error {
					if point != tc.point || seen.Add(1) == 1 { // the first is m0's turn
						return nil
					}
					reached <- struct{}{}
					<-ctx.Done()
					return ctx.Err()
				})
			}
			if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "m0"}); err != nil {
				t.Fatal(err)
			}
			<-g.streaming
			var batch chat.Turn
			for i := 1; i <= 3; i++ {
				turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: fmt.Sprintf("m%d", i), Multitask: chat.MultitaskMerge})
				if err != nil {
					t.Fatal(err)
				}
				if i > 1 && turn != batch {
					t.Fatalf("reply %+v, want the batch's %+v", turn, batch)
				}
				batch = turn
			}
			if tc.point != "" {
				close(g.release)
				wait(t, reached)
			}
			h.r.Close()
			recoverHost(t, e, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), nil)
			want := []string{"m0", "answer", "m1", "m2", "m3", "answer"}
			if got := conversation(t, e, "a1"); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("messages\n got %q\nwant %q", got, want)
			}
			starts := turnStarts(t, e, "a1")
			if len(starts) != 2 || starts[batch.RequestID] != 1 {
				t.Fatalf("turns %v, want 2, the batch's %s once", starts, batch.RequestID)
			}
			if tr, err := e.store.Turn("a1", batch.RequestID); err != nil || tr.Status != chat.TurnCompleted || len(tr.Merged) != 2 {
				t.Fatalf("batch turn %+v %v", tr, err)
			}
			cs, _ := streamOf(t, e.lg, "a1", batch.StreamID)
			if count(cs, chunk.Finish) != 1 {
				t.Fatalf("batch stream: %d finish chunks", count(cs, chunk.Finish))
			}
			if q, err := e.store.Queue("a1"); err != nil || len(q) != 0 {
				t.Fatalf("queue left %d %v", len(q), err)
			}
			checkClean(t, e.lg)
		})
	}
}

// TestMultitaskMergeOverflow: a batch larger than one turn takes (here
// bounded at 2 merged messages, 100 by default) answers the first 3 in its
// turn; a message the batch's turn did not take starts a turn of its own.
// Each is answered once, in order.
func TestMultitaskMergeOverflow(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	h := e.host(t, "a1", g, nil)
	chat.SetMaxMerged(h.a, 2)
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "m0"}); err != nil {
		t.Fatal(err)
	}
	<-g.streaming
	const n = 4
	for i := 1; i <= n; i++ {
		if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: fmt.Sprintf("m%d", i), Multitask: chat.MultitaskMerge}); err != nil {
			t.Fatal(err)
		}
	}
	close(g.release)
	waitTurns(t, e, "a1", 3)
	h.r.Wait()
	want := []string{"m0", "answer"}
	for i := 1; i <= n; i++ {
		want = append(want, fmt.Sprintf("m%d", i))
		if i == n-1 || i == n {
			want = append(want, "answer")
		}
	}
	if got := conversation(t, e, "a1"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("messages\n got %q\nwant %q", got, want)
	}
	starts := turnStarts(t, e, "a1")
	if len(starts) != 3 {
		t.Fatalf("%d turns, want 3", len(starts))
	}
	for req, k := range starts {
		if k != 1 {
			t.Fatalf("turn %s started %d times", req, k)
		}
	}
	if q, err := e.store.Queue("a1"); err != nil || len(q) != 0 {
		t.Fatalf("queue left %d %v", len(q), err)
	}
	checkClean(t, e.lg)
}

// TestMultitaskBatchesWaitForFormat: while Config.BatchesWritable says no
// (in a cluster, a node of the previous release does not read a batch),
// "merge" and "debounce" queue each message as "enqueue" does: two
// messages sent while a turn runs get two turns, answered in order, and
// no turn.started carries merged messages.
func TestMultitaskBatchesWaitForFormat(t *testing.T) {
	for _, policy := range []chat.Multitask{chat.MultitaskMerge, chat.MultitaskDebounce} {
		t.Run(string(policy), func(t *testing.T) {
			e := newEnv(t)
			g := newGate()
			h := e.host(t, "a1", g, func(c *chat.Config) { c.BatchesWritable = func() bool { return false } })
			first, err := h.a.Send(t.Context(), chat.SendRequest{Text: "m0"})
			if err != nil {
				t.Fatal(err)
			}
			<-g.streaming
			var turns []chat.Turn
			for i := 1; i <= 2; i++ {
				turn, err := h.a.Send(t.Context(), chat.SendRequest{Message: textMsg(fmt.Sprintf("q%d", i), fmt.Sprintf("m%d", i)), Multitask: policy})
				if err != nil {
					t.Fatal(err)
				}
				turns = append(turns, turn)
			}
			if turns[0].RequestID == first.RequestID || turns[1].RequestID == turns[0].RequestID {
				t.Fatalf("replies %+v, want a turn of its own for each", turns)
			}
			close(g.release)
			h.r.Wait()
			want := []string{"m0", "answer", "m1", "answer", "m2", "answer"}
			if got := conversation(t, e, "a1"); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("messages\n got %q\nwant %q", got, want)
			}
			for _, turn := range turns {
				if tr, err := e.store.Turn("a1", turn.RequestID); err != nil || tr.Status != chat.TurnCompleted || len(tr.Merged) != 0 {
					t.Fatalf("turn %+v %v, want completed with nothing merged", tr, err)
				}
			}
			checkClean(t, e.lg)
		})
	}
}
