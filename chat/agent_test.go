package chat_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
)

func answer(prompt string) string {
	return llm.NewLocal(llm.LocalConfig{}).Answer(llm.Request{Messages: []llm.Message{llm.Text(llm.RoleUser, prompt)}})
}

func TestSendStreamsAndRecords(t *testing.T) {
	e := newEnv(t)
	h := e.host(t, "a1", &fake{scripts: []func(context.Context, llm.Request, func(llm.Delta, error) bool){passLocal()}}, nil)
	var want chat.Usage
	for i, prompt := range []string{"hello there", "tell me a story"} {
		turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: prompt, Body: json.RawMessage(`{"k":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		h.r.Wait()
		// The reply's cursor is the stream's real start: following the
		// agent's chunks after it gives the turn's first chunk.
		next, err := e.lg.Read(t.Context(), eventlog.Filter{Agent: "a1", Chunks: true}, turn.Cursor, 1)
		if err != nil || len(next) != 1 || next[0].Stream != turn.StreamID || (i > 0 && turn.Cursor == 0) {
			t.Fatalf("after cursor %d: %+v, %v; want the first chunk of stream %s", turn.Cursor, next, err, turn.StreamID)
		}
		msgs := settled(t, e, "a1")
		if got, want := len(msgs), 2*(i+1); got != want {
			t.Fatalf("%d messages, want %d", got, want)
		}
		user, asst := msgs[2*i], msgs[2*i+1]
		if user.Role != chat.RoleUser || user.Text() != prompt || user.RequestID != turn.RequestID {
			t.Fatalf("user message = %+v", user)
		}
		if asst.Role != chat.RoleAssistant || asst.ID != turn.MessageID || asst.Text() != answer(prompt) {
			t.Fatalf("assistant message = %+v, want text %q", asst, answer(prompt))
		}
		cs, text := streamOf(t, e.lg, "a1", turn.StreamID)
		if text != answer(prompt) {
			t.Fatalf("streamed %q", text)
		}
		types := []string{cs[0].Type, cs[1].Type, cs[2].Type, cs[len(cs)-3].Type, cs[len(cs)-2].Type, cs[len(cs)-1].Type}
		if got, want := strings.Join(types, ","), "start,start-step,text-start,text-end,finish-step,finish"; got != want {
			t.Fatalf("chunk types %s, want %s", got, want)
		}
		if cs[0].MessageID != turn.MessageID || cs[0].RequestID != turn.RequestID {
			t.Fatalf("start chunk = %+v", cs[0])
		}
		info := streamInfo(t, e, "a1", turn.StreamID)
		if info.Status != chunk.StatusCompleted {
			t.Fatalf("stream status %s", info.Status)
		}
		tr := lastTurn(t, e, "a1")
		if tr.Status != chat.TurnCompleted || tr.RequestID != turn.RequestID || string(tr.Body) != `{"k":1}` {
			t.Fatalf("turn = %+v", tr)
		}
		want.Turns++
		// The local model counts a token per delta; the stream may hold
		// fewer chunks (a burst is merged), and its finish chunk says.
		var md chunk.FinishMetadata
		if err := json.Unmarshal(cs[len(cs)-1].MessageMetadata, &md); err != nil || md.Usage == nil {
			t.Fatalf("finish chunk metadata %s: %v", cs[len(cs)-1].MessageMetadata, err)
		}
		want.Output += md.Usage.OutputTokens
	}
	u, err := h.a.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if u.Turns != want.Turns || u.Output != want.Output || u.Input <= 0 {
		t.Fatalf("usage = %+v, want turns %d output %d", u, want.Turns, want.Output)
	}
	st, err := h.a.Status()
	if err != nil {
		t.Fatal(err)
	}
	if st.ActiveTurn != nil || st.LastTurn == nil || st.LastStream == nil || st.LastStream.Status != chunk.StatusCompleted {
		t.Fatalf("status = %+v", st)
	}
	// Pagination over the visible conversation.
	page, next, err := h.a.Messages(chat.Page{Limit: 3})
	if err != nil || len(page) != 3 || next != page[2].ID {
		t.Fatalf("page 1: %d messages, next %q, %v", len(page), next, err)
	}
	page, next, err = h.a.Messages(chat.Page{After: next, Limit: 3})
	if err != nil || len(page) != 1 || next != "" {
		t.Fatalf("page 2: %d messages, next %q, %v", len(page), next, err)
	}
}

func TestSendBadInput(t *testing.T) {
	e := newEnv(t)
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), nil)
	for _, tc := range []struct {
		name string
		req  chat.SendRequest
		want error
	}{
		{"nothing", chat.SendRequest{}, chat.ErrEmptyMessage},
		{"blank", chat.SendRequest{Text: "  \n"}, chat.ErrEmptyMessage},
		{"empty message", chat.SendRequest{Message: &chat.Message{}}, chat.ErrEmptyMessage},
		{"both", chat.SendRequest{Text: "x", Message: &chat.Message{Parts: []chat.Part{{Type: chat.PartText, Text: "y"}}}}, chat.ErrInvalidMessage},
		{"assistant role", chat.SendRequest{Message: &chat.Message{Role: chat.RoleAssistant, Parts: []chat.Part{{Type: chat.PartText, Text: "y"}}}}, chat.ErrInvalidMessage},
		{"bad body", chat.SendRequest{Text: "x", Body: json.RawMessage(`{`)}, chat.ErrInvalidMessage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := h.a.Send(t.Context(), tc.req); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	if msgs := settled(t, e, "a1"); len(msgs) != 0 {
		t.Fatalf("bad input stored %d messages", len(msgs))
	}
	// A retried message id is the same command, not a second turn: it
	// gets the original's reply (TestSendOnce). The id of another kind of
	// message is a conflict.
	m := &chat.Message{ID: "m1", Parts: []chat.Part{{Type: chat.PartText, Text: "hi"}}}
	first, err := h.a.Send(t.Context(), chat.SendRequest{Message: m})
	if err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	if again, err := h.a.Send(t.Context(), chat.SendRequest{Message: m}); err != nil || again != first {
		t.Fatalf("retried id: %+v, %v; want %+v", again, err, first)
	}
	asst := &chat.Message{ID: first.MessageID, Parts: []chat.Part{{Type: chat.PartText, Text: "hi"}}}
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Message: asst}); !errors.Is(err, chat.ErrDuplicateMessage) {
		t.Fatalf("the assistant message's id: %v, want ErrDuplicateMessage", err)
	}
}

func TestTerminalProviderError(t *testing.T) {
	e := newEnv(t)
	p := &fake{scripts: []func(context.Context, llm.Request, func(llm.Delta, error) bool){
		failWith(&llm.Error{Provider: "fake", Status: 401, Err: errors.New("bad key")}),
	}}
	h := e.host(t, "a1", p, nil)
	turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	msgs := settled(t, e, "a1")
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want the user's only", len(msgs))
	}
	if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnFailed || !strings.Contains(tr.Error, "bad key") {
		t.Fatalf("turn = %+v", tr)
	}
	if info := streamInfo(t, e, "a1", turn.StreamID); info.Status != chunk.StatusError || !strings.Contains(info.Error, "bad key") {
		t.Fatalf("stream = %+v", info)
	}
	// The agent takes the next message.
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "again"}); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
}

func TestRetryableErrorContinuesInProcess(t *testing.T) {
	e := newEnv(t)
	cut := func(ctx context.Context, req llm.Request, yield func(llm.Delta, error) bool) {
		// Three words, then a cut connection.
		n := 0
		for d, err := range llm.NewLocal(llm.LocalConfig{Rate: -1}).Stream(ctx, req) {
			if err != nil || (d.Kind == llm.TextDelta && n == 3) {
				break
			}
			if d.Kind == llm.TextDelta {
				n++
			}
			if !yield(d, nil) {
				return
			}
		}
		yield(llm.Delta{}, &llm.Error{Provider: "fake", Retryable: true, Err: llm.ErrStreamCut})
	}
	p := &fake{scripts: []func(context.Context, llm.Request, func(llm.Delta, error) bool){cut, passLocal()}}
	h := e.host(t, "a1", p, nil)
	turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: "tell me a story"})
	if err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	msgs := settled(t, e, "a1")
	if len(msgs) != 2 || msgs[1].Text() != answer("tell me a story") {
		t.Fatalf("messages = %+v", msgs)
	}
	if c := p.reqs[1].Continue; c == nil || c.PartialText == "" || !strings.HasPrefix(answer("tell me a story"), c.PartialText) {
		t.Fatalf("second call continuation = %+v", c)
	}
	if _, text := streamOf(t, e.lg, "a1", turn.StreamID); text != answer("tell me a story") {
		t.Fatalf("streamed %q", text)
	}
}

func TestOneTurnAtATime(t *testing.T) {
	e := newEnv(t)
	reached := make(chan struct{}, 1)
	p := &fake{scripts: []func(context.Context, llm.Request, func(llm.Delta, error) bool){cutAfter(2, reached)}}
	h := e.host(t, "a1", p, nil)
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "one"}); err != nil {
		t.Fatal(err)
	}
	wait(t, reached)
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "two"}); !errors.Is(err, chat.ErrTurnActive) {
		t.Fatalf("second send: %v", err)
	}
	st, err := h.a.Status()
	if err != nil || st.ActiveTurn == nil {
		t.Fatalf("status = %+v, %v", st, err)
	}
}

func TestCancelAndInterrupt(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(context.Context, *chat.Agent) error
	}{
		{"cancel", func(ctx context.Context, a *chat.Agent) error {
			ok, err := a.Cancel(ctx)
			if err == nil && !ok {
				err = errors.New("Cancel found no turn")
			}
			return err
		}},
		{"interrupt", func(ctx context.Context, a *chat.Agent) error { return a.SetInterrupt(ctx, chat.InterruptTurn) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			reached := make(chan struct{}, 1)
			p := &fake{scripts: []func(context.Context, llm.Request, func(llm.Delta, error) bool){cutAfter(4, reached), passLocal()}}
			h := e.host(t, "a1", p, nil)
			const prompt = "tell me a story"
			turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: prompt})
			if err != nil {
				t.Fatal(err)
			}
			wait(t, reached)
			if err := tc.stop(t.Context(), h.a); err != nil {
				t.Fatal(err)
			}
			h.r.Wait()
			msgs := settled(t, e, "a1")
			cs, text := streamOf(t, e.lg, "a1", turn.StreamID)
			if len(msgs) != 2 || msgs[1].Text() != text || text == "" || !strings.HasPrefix(answer(prompt), text) {
				t.Fatalf("messages %+v, streamed %q", msgs, text)
			}
			if cs[len(cs)-1].Type != chunk.Abort {
				t.Fatalf("last chunk %+v", cs[len(cs)-1])
			}
			if info := streamInfo(t, e, "a1", turn.StreamID); info.Status != chunk.StatusAborted {
				t.Fatalf("stream status %s", info.Status)
			}
			if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnInterrupted {
				t.Fatalf("turn = %+v", tr)
			}
			if h.a.Interrupted(chat.InterruptTurn) {
				t.Fatal("turn interrupt still set")
			}
			if ok, err := h.a.Cancel(t.Context()); ok || err != nil {
				t.Fatalf("cancel without a turn: %v %v", ok, err)
			}
			// The next turn runs normally.
			if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "hello"}); err != nil {
				t.Fatal(err)
			}
			h.r.Wait()
			if msgs := settled(t, e, "a1"); len(msgs) != 4 || msgs[3].Text() != answer("hello") {
				t.Fatalf("after cancel: %+v", msgs)
			}
		})
	}
}

func TestInterruptFlags(t *testing.T) {
	e := newEnv(t)
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), nil)
	if h.a.Interrupted("pause") {
		t.Fatal("set before SetInterrupt")
	}
	if err := h.a.SetInterrupt(t.Context(), "pause"); err != nil {
		t.Fatal(err)
	}
	if !h.a.Interrupted("pause") {
		t.Fatal("not set after SetInterrupt")
	}
	if err := h.a.ClearInterrupt(t.Context(), "pause"); err != nil {
		t.Fatal(err)
	}
	if h.a.Interrupted("pause") {
		t.Fatal("set after ClearInterrupt")
	}
}

func TestSetStateCAS(t *testing.T) {
	e := newEnv(t)
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), nil)
	// A second agent instance in the same process, as another owner would be.
	other := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), nil)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	vers := make([]int, 2)
	for i, a := range []*chat.Agent{h.a, other.a} {
		wg.Go(func() {
			vers[i], errs[i] = a.SetState(t.Context(), json.RawMessage(`{"who":`+string(rune('0'+i))+`}`), 0)
		})
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
			if vers[i] != 1 {
				t.Fatalf("winner got version %d", vers[i])
			}
		case !errors.Is(err, chat.ErrVersionConflict):
			t.Fatalf("loser error %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d winners, want 1 (%v)", won, errs)
	}
	if _, err := h.a.SetState(t.Context(), json.RawMessage(`{"n":2}`), 0); !errors.Is(err, chat.ErrVersionConflict) {
		t.Fatalf("stale version: %v", err)
	}
	v, err := h.a.SetState(t.Context(), json.RawMessage(`{"n":2}`), 1)
	if err != nil || v != 2 {
		t.Fatalf("set v2: %d %v", v, err)
	}
	val, ver, err := other.a.State()
	if err != nil || ver != 2 || string(val) != `{"n":2}` {
		t.Fatalf("state = %s v%d %v", val, ver, err)
	}
}
