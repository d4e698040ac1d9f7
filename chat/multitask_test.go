package chat_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
)

// TestMultitaskReject: the default policy, and "reject", refuse a message
// sent while a turn runs and store nothing of it; an unknown
// policy is bad input.
func TestMultitaskReject(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	h := e.host(t, "a1", g, nil)
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "first"}); err != nil {
		t.Fatal(err)
	}
	<-g.streaming
	for _, m := range []chat.Multitask{"", chat.MultitaskReject} {
		if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "second", Multitask: m}); !errors.Is(err, chat.ErrTurnActive) {
			t.Fatalf("multitask %q: %v, want ErrTurnActive", m, err)
		}
	}
	for _, tc := range []struct{ policy, want string }{
		{"later", `"later" is not a multitask policy; use one of reject, interrupt, enqueue, steer, rollback, merge, debounce`},
	} {
		_, err := h.a.Send(t.Context(), chat.SendRequest{Text: "second", Multitask: chat.Multitask(tc.policy)})
		if !errors.Is(err, chat.ErrMultitask) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("multitask %q: %v", tc.policy, err)
		}
	}
	close(g.release)
	h.r.Wait()
	if msgs := settled(t, e, "a1"); len(msgs) != 2 || msgs[0].Text() != "first" {
		t.Fatalf("messages %+v", msgs)
	}
}

// TestMultitaskInterrupt: a message sent with "interrupt" ends the running
// turn as interrupted (one abort chunk, its partial answer kept) and is
// answered by a turn of its own.
func TestMultitaskInterrupt(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	h := e.host(t, "a1", g, nil)
	first, err := h.a.Send(t.Context(), chat.SendRequest{Text: "tell me a story"})
	if err != nil {
		t.Fatal(err)
	}
	<-g.streaming
	second, err := h.a.Send(t.Context(), chat.SendRequest{Text: "hello", Multitask: chat.MultitaskInterrupt})
	if err != nil {
		t.Fatal(err)
	}
	close(g.release)
	h.r.Wait()
	cs, partial := streamOf(t, e.lg, "a1", first.StreamID)
	if count(cs, chunk.Abort) != 1 || cs[len(cs)-1].Type != chunk.Abort || count(cs, chunk.Finish) != 0 || partial == "" {
		t.Fatalf("first stream: %d chunks, last %+v, text %q", len(cs), cs[len(cs)-1], partial)
	}
	if tr, err := e.store.Turn("a1", first.RequestID); err != nil || tr.Status != chat.TurnInterrupted {
		t.Fatalf("first turn %+v %v", tr, err)
	}
	cs, text := streamOf(t, e.lg, "a1", second.StreamID)
	if count(cs, chunk.Finish) != 1 || text != answer("hello") {
		t.Fatalf("second stream %q", text)
	}
	msgs := settled(t, e, "a1")
	got := make([]string, len(msgs))
	for i, m := range msgs {
		got[i] = m.Role + ":" + m.Text()
	}
	want := []string{"user:tell me a story", "assistant:" + partial, "user:hello", "assistant:" + answer("hello")}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("messages\n got %q\nwant %q", got, want)
	}
	if h.a.Interrupted(chat.InterruptTurn) {
		t.Fatal("turn interrupt still set")
	}
	// Without a running turn, "interrupt" just starts the turn.
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "again", Multitask: chat.MultitaskInterrupt}); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	if msgs := settled(t, e, "a1"); len(msgs) != 6 {
		t.Fatalf("%d messages", len(msgs))
	}
}

// TestMultitaskEnqueue: messages sent with "enqueue" while a turn runs are
// acknowledged at once, each with its own stream, and answered once each,
// in order, after the running turn; a retried command gets its queued
// turn back; "reject" is refused while messages wait.
func TestMultitaskEnqueue(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	h := e.host(t, "a1", g, nil)
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "m0"}); err != nil {
		t.Fatal(err)
	}
	<-g.streaming
	var turns []chat.Turn
	for i := 1; i <= 3; i++ {
		turn, err := h.a.Send(t.Context(), chat.SendRequest{Message: &chat.Message{ID: fmt.Sprintf("q%d", i), Parts: []chat.Part{{Type: chat.PartText, Text: fmt.Sprintf("m%d", i)}}}, Multitask: chat.MultitaskEnqueue})
		if err != nil {
			t.Fatal(err)
		}
		turns = append(turns, turn)
	}
	again, err := h.a.Send(t.Context(), chat.SendRequest{Message: &chat.Message{ID: "q2", Parts: []chat.Part{{Type: chat.PartText, Text: "m2"}}}, Multitask: chat.MultitaskEnqueue})
	if err != nil || again != turns[1] {
		t.Fatalf("retried enqueue: %+v %v, want %+v", again, err, turns[1])
	}
	if q, err := e.store.Queue("a1"); err != nil || len(q) != 3 {
		t.Fatalf("queue %d %v", len(q), err)
	}
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "no", Multitask: chat.MultitaskReject}); !errors.Is(err, chat.ErrTurnActive) {
		t.Fatalf("reject with a queue: %v", err)
	}
	close(g.release)
	h.r.Wait()
	checkQueued(t, e, "a1", 3, turns)
}

// checkQueued checks that m0..mn were answered once each, in order, and
// that each queued turn streamed its own answer.
func checkQueued(t *testing.T, e *env, agent string, n int, turns []chat.Turn) {
	t.Helper()
	msgs := settled(t, e, agent)
	var got, want []string
	for _, m := range msgs {
		if m.Role == chat.RoleUser {
			got = append(got, m.Text())
		} else {
			got = append(got, "answer")
		}
	}
	for i := 0; i <= n; i++ {
		want = append(want, fmt.Sprintf("m%d", i), "answer")
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("messages\n got %q\nwant %q", got, want)
	}
	for i, turn := range turns {
		cs, text := streamOf(t, e.lg, agent, turn.StreamID)
		if count(cs, chunk.Finish) != 1 || count(cs, chunk.Start) != 1 || text != answer(fmt.Sprintf("m%d", i+1)) {
			t.Fatalf("stream of m%d: %d chunks, text %q", i+1, len(cs), text)
		}
		if tr, err := e.store.Turn(agent, turn.RequestID); err != nil || tr.Status != chat.TurnCompleted {
			t.Fatalf("turn of m%d: %+v %v", i+1, tr, err)
		}
	}
	for req, k := range turnStarts(t, e, agent) {
		if k != 1 {
			t.Fatalf("turn %s started %d times", req, k)
		}
	}
	if q, err := e.store.Queue(agent); err != nil || len(q) != 0 {
		t.Fatalf("queue left %d %v", len(q), err)
	}
}

// TestMultitaskEnqueueRecovered: the process dies while a turn runs and
// messages wait in the queue; the next incarnation recovers the turn and
// then answers the queued messages once each, in order.
func TestMultitaskEnqueueRecovered(t *testing.T) {
	e := newEnv(t)
	reached := make(chan struct{}, 1)
	h := e.host(t, "a1", &fake{scripts: []script{cutAfter(2, reached)}}, nil)
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "m0"}); err != nil {
		t.Fatal(err)
	}
	wait(t, reached)
	var turns []chat.Turn
	for i := 1; i <= 3; i++ {
		turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: fmt.Sprintf("m%d", i), Multitask: chat.MultitaskEnqueue})
		if err != nil {
			t.Fatal(err)
		}
		turns = append(turns, turn)
	}
	h.r.Close()
	if last, err := e.lg.LastSeq(t.Context(), eventlog.Filter{Agent: "a1"}); err != nil || e.store.WaitFor(t.Context(), last) != nil {
		t.Fatal(err)
	}
	recoverHost(t, e, "a1", &fake{scripts: []script{passLocal()}}, nil)
	checkQueued(t, e, "a1", 3, turns)
}

// TestMultitaskSteer: a message sent with "steer" while a turn streams its
// final answer reaches the turn's next model call, one more step in the
// same stream (the local model echoes it), and the turn ends once; with no
// turn running, "steer" starts a turn.
func TestMultitaskSteer(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	h := e.host(t, "a1", g, nil)
	first, err := h.a.Send(t.Context(), chat.SendRequest{Text: "first question"})
	if err != nil {
		t.Fatal(err)
	}
	<-g.streaming
	steered, err := h.a.Send(t.Context(), chat.SendRequest{Text: "and a second thought", Multitask: chat.MultitaskSteer})
	if err != nil {
		t.Fatal(err)
	}
	if steered != (chat.Turn{RequestID: first.RequestID, StreamID: first.StreamID, MessageID: first.MessageID}) {
		t.Fatalf("steer reply %+v, want the running turn %+v", steered, first)
	}
	close(g.release)
	h.r.Wait()
	cs, text := streamOf(t, e.lg, "a1", first.StreamID)
	if count(cs, chunk.Finish) != 1 || count(cs, chunk.StartStep) != 2 || text != answer("first question")+answer("and a second thought") {
		t.Fatalf("stream: %d finish, %d steps, text %q", count(cs, chunk.Finish), count(cs, chunk.StartStep), text)
	}
	msgs := settled(t, e, "a1")
	if len(msgs) != 3 || msgs[0].Text() != "first question" || msgs[1].Text() != "and a second thought" || msgs[2].Role != chat.RoleAssistant {
		t.Fatalf("messages %+v", msgs)
	}
	if tr := lastTurn(t, e, "a1"); tr.RequestID != first.RequestID || tr.Status != chat.TurnCompleted {
		t.Fatalf("turn %+v", tr)
	}
	if n := len(turnStarts(t, e, "a1")); n != 1 {
		t.Fatalf("%d turns", n)
	}
	// Idle: the message starts its own turn.
	turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: "later", Multitask: chat.MultitaskSteer})
	if err != nil || turn.RequestID == first.RequestID {
		t.Fatalf("steer when idle: %+v %v", turn, err)
	}
	h.r.Wait()
	if msgs := settled(t, e, "a1"); len(msgs) != 5 {
		t.Fatalf("%d messages", len(msgs))
	}
}

// TestMultitaskRollback: a message sent with "rollback" ends the running
// turn (one abort chunk in its stream, turn.interrupted) and removes its
// messages from the conversation, earlier ones kept; the new message is
// answered by a turn of its own.
func TestMultitaskRollback(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	h := e.host(t, "a1", g, nil)
	close(g.release) // the first exchange runs through
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "zero"}); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	<-g.streaming
	g.release = make(chan struct{})
	first, err := h.a.Send(t.Context(), chat.SendRequest{Text: "tell me a story"})
	if err != nil {
		t.Fatal(err)
	}
	<-g.streaming
	second, err := h.a.Send(t.Context(), chat.SendRequest{Text: "hello", Multitask: chat.MultitaskRollback})
	if err != nil {
		t.Fatal(err)
	}
	close(g.release)
	h.r.Wait()
	cs, _ := streamOf(t, e.lg, "a1", first.StreamID)
	if count(cs, chunk.Abort) != 1 || cs[len(cs)-1].Type != chunk.Abort {
		t.Fatalf("first stream: %d chunks, last %+v", len(cs), cs[len(cs)-1])
	}
	if tr, err := e.store.Turn("a1", first.RequestID); err != nil || tr.Status != chat.TurnInterrupted {
		t.Fatalf("first turn %+v %v", tr, err)
	}
	if cs, text := streamOf(t, e.lg, "a1", second.StreamID); count(cs, chunk.Finish) != 1 || text != answer("hello") {
		t.Fatalf("second stream %q", text)
	}
	wantConversation(t, e, "a1", "zero", "hello")
}

// wantConversation checks that agent's settled conversation is each of
// prompts answered in turn, by the local model's answer.
func wantConversation(t *testing.T, e *env, agent string, prompts ...string) {
	t.Helper()
	var got, want []string
	for _, m := range settled(t, e, agent) {
		got = append(got, m.Role+":"+m.Text())
	}
	for _, p := range prompts {
		want = append(want, "user:"+p, "assistant:"+answer(p))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("messages\n got %q\nwant %q", got, want)
	}
}

// TestMultitaskRollbackAfterTheFinish: a "rollback" that arrives once the
// running turn's finish chunk is durable, while that turn records its end,
// leaves that turn in the conversation. Its client saw the answer end; the
// interrupt came too late to stop it, and rollback removes only a turn it
// stopped. Removed, a double-texting client's previous, answered message
// vanished from the conversation (seen in a chaos run).
func TestMultitaskRollbackAfterTheFinish(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	close(g.release)
	h := e.host(t, "a1", g, nil)
	reached, release := holdAtEnded(h)
	first, err := h.a.Send(t.Context(), chat.SendRequest{Text: "one"})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, reached)
	sent := make(chan error, 1)
	go func() {
		_, err := h.a.Send(t.Context(), chat.SendRequest{Text: "two", Multitask: chat.MultitaskRollback})
		sent <- err
	}()
	time.Sleep(50 * time.Millisecond) // the rollback finds the turn running
	close(release)
	if err := <-sent; err != nil {
		t.Fatalf("rollback: %v", err)
	}
	h.r.Wait()
	if tr, err := e.store.Turn("a1", first.RequestID); err != nil || tr.Status != chat.TurnCompleted {
		t.Fatalf("first turn %+v %v, want completed", tr, err)
	}
	wantConversation(t, e, "a1", "one", "two")
}

// TestMultitaskRollbackOfARecoveredFinish: the node that ran a turn died
// after its finish chunk was durable, before the turn's records. A
// "rollback" sent to the next owner finds the turn waiting for recovery;
// the recovery completes it from its stream (the interrupt comes too late
// to stop an answer that has ended), and the turn stays in the
// conversation.
func TestMultitaskRollbackOfARecoveredFinish(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	close(g.release)
	h := e.host(t, "a1", g, nil)
	reached := make(chan struct{}, 1)
	chat.StopAt(h.a, func(ctx context.Context, point string) error {
		if point != "ended" {
			return nil
		}
		reached <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	first, err := h.a.Send(t.Context(), chat.SendRequest{Text: "one"})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, reached)
	h.r.Close()

	h = e.host(t, "a1", g, nil)
	sent := make(chan error, 1)
	go func() {
		_, err := h.a.Send(t.Context(), chat.SendRequest{Text: "two", Multitask: chat.MultitaskRollback})
		sent <- err
	}()
	time.Sleep(100 * time.Millisecond) // the rollback finds the turn waiting
	if err := h.r.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatalf("rollback: %v", err)
	}
	h.r.Wait()
	if tr, err := e.store.Turn("a1", first.RequestID); err != nil || tr.Status != chat.TurnCompleted {
		t.Fatalf("first turn %+v %v, want completed", tr, err)
	}
	wantConversation(t, e, "a1", "one", "two")
}
