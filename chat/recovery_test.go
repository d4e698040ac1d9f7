package chat_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
)

type script = func(context.Context, llm.Request, func(llm.Delta, error) bool)

// crash starts a turn on a host whose provider stops after k words, waits
// until the provider got there, and closes the host's Runner, the way a
// process dies: the fiber's row stays, the chunks written so far are stored.
func crash(t *testing.T, e *env, agent, prompt string, k int) chat.Turn {
	t.Helper()
	reached := make(chan struct{}, 1)
	h := e.host(t, agent, &fake{scripts: []script{cutAfter(k, reached)}}, nil)
	turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: prompt, Body: []byte(`{"model":"x"}`)})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, reached)
	h.r.Close()
	return turn
}

// recoverHost starts a new incarnation and runs recovery to the end.
func recoverHost(t *testing.T, e *env, agent string, p llm.Provider, opt func(*chat.Config)) *host {
	t.Helper()
	h := e.host(t, agent, p, opt)
	if err := h.r.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	return h
}

type hookLog struct {
	mu   sync.Mutex
	recs []chat.Recovery
	dec  chat.RecoveryDecision
}

func (l *hookLog) hook(_ context.Context, rec chat.Recovery) (chat.RecoveryDecision, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, rec)
	return l.dec, nil
}

func TestRecoverContinuesPartial(t *testing.T) {
	e := newEnv(t)
	const prompt = "tell me a story"
	turn := crash(t, e, "a1", prompt, 5)
	_, partial := streamOf(t, e.lg, "a1", turn.StreamID)
	if partial == "" {
		t.Fatal("nothing stored before the crash")
	}
	hooks := &hookLog{dec: chat.RecoveryDecision{Persist: true, Continue: true}}
	p := &fake{scripts: []script{passLocal()}}
	recoverHost(t, e, "a1", p, func(c *chat.Config) { c.OnChatRecovery = hooks.hook })

	if len(hooks.recs) != 1 {
		t.Fatalf("hook called %d times", len(hooks.recs))
	}
	rec := hooks.recs[0]
	if rec.PartialText != partial || rec.RequestID != turn.RequestID || rec.StreamID != turn.StreamID ||
		string(rec.LastBody) != `{"model":"x"}` || len(rec.Messages) != 1 || rec.ResponseID == "" {
		t.Fatalf("recovery = %+v", rec)
	}
	if c := p.reqs[0].Continue; c == nil || c.PartialText != partial || c.ResponseID != rec.ResponseID {
		t.Fatalf("continuation = %+v", c)
	}
	msgs := settled(t, e, "a1")
	if len(msgs) != 2 || msgs[0].Role != chat.RoleUser || msgs[1].Role != chat.RoleAssistant || msgs[1].ID != turn.MessageID {
		t.Fatalf("messages = %+v", msgs)
	}
	if got, want := msgs[1].Text(), answer(prompt); got != want {
		t.Fatalf("assistant text\n got %q\nwant %q", got, want)
	}
	cs, text := streamOf(t, e.lg, "a1", turn.StreamID)
	if text != answer(prompt) {
		t.Fatalf("stream text %q", text)
	}
	if count(cs, chunk.Start) != 1 || count(cs, chunk.TextStart) != 1 || count(cs, chunk.Finish) != 1 {
		t.Fatalf("stream chunks: %d start, %d text-start, %d finish", count(cs, chunk.Start), count(cs, chunk.TextStart), count(cs, chunk.Finish))
	}
	if info := streamInfo(t, e, "a1", turn.StreamID); info.Status != chunk.StatusCompleted || info.Chunks != len(cs) {
		t.Fatalf("stream = %+v", info)
	}
	if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnCompleted {
		t.Fatalf("turn = %+v", tr)
	}
	if rows := runs(t, e, "a1"); len(rows) != 0 {
		t.Fatalf("runs table: %+v", rows)
	}
	// Recovering again finds nothing to do.
	again := recoverHost(t, e, "a1", &fake{scripts: []script{failWith(errNotCalled)}}, nil)
	if msgs := settled(t, e, "a1"); len(msgs) != 2 {
		t.Fatalf("after second recovery: %d messages", len(msgs))
	}
	_ = again
}

func TestRecoverRetriesWhenNothingStreamed(t *testing.T) {
	e := newEnv(t)
	const prompt = "hello there"
	turn := crash(t, e, "a1", prompt, 0)
	hooks := &hookLog{}
	recoverHost(t, e, "a1", &fake{scripts: []script{passLocal()}}, func(c *chat.Config) { c.OnChatRecovery = hooks.hook })
	if len(hooks.recs) != 0 {
		t.Fatalf("hook called for a turn that streamed nothing")
	}
	msgs := settled(t, e, "a1")
	if len(msgs) != 2 || msgs[1].Text() != answer(prompt) {
		t.Fatalf("messages = %+v", msgs)
	}
	cs, text := streamOf(t, e.lg, "a1", turn.StreamID)
	if text != answer(prompt) || count(cs, chunk.Start) != 1 || cs[len(cs)-1].Type != chunk.Finish {
		t.Fatalf("stream %q with %d chunks", text, len(cs))
	}
}

func TestRecoverDecisions(t *testing.T) {
	const prompt = "tell me a story"
	for _, tc := range []struct {
		name    string
		dec     chat.RecoveryDecision
		persist bool
	}{
		{"persist only", chat.RecoveryDecision{Persist: true}, true},
		{"leave history", chat.RecoveryDecision{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			turn := crash(t, e, "a1", prompt, 3)
			_, partial := streamOf(t, e.lg, "a1", turn.StreamID)
			hooks := &hookLog{dec: tc.dec}
			p := &fake{scripts: []script{failWith(errNotCalled)}}
			recoverHost(t, e, "a1", p, func(c *chat.Config) { c.OnChatRecovery = hooks.hook })
			if p.Calls() != 0 {
				t.Fatal("provider called without Continue")
			}
			msgs := settled(t, e, "a1")
			if tc.persist {
				if len(msgs) != 2 || msgs[1].Text() != partial || msgs[1].ID != turn.MessageID {
					t.Fatalf("messages = %+v, want the partial %q", msgs, partial)
				}
			} else if len(msgs) != 1 {
				t.Fatalf("history changed: %+v", msgs)
			}
			cs, _ := streamOf(t, e.lg, "a1", turn.StreamID)
			if cs[len(cs)-1].Type != chunk.Abort {
				t.Fatalf("stream ends with %s", cs[len(cs)-1].Type)
			}
			if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnInterrupted {
				t.Fatalf("turn = %+v", tr)
			}
		})
	}
}

func TestRecoveryBudgetExhausted(t *testing.T) {
	e := newEnv(t)
	const max = 2
	// Every recovery counts (no window): see TestRecoveriesInWindowCountOnce.
	opt := func(c *chat.Config) { c.MaxRecoveryAttempts, c.AttemptWindow = max, -1 }
	turn := crash(t, e, "a1", "tell me a story", 2)
	// Each recovery gets no further: the provider stalls at once.
	for range max {
		reached := make(chan struct{}, 1)
		h := e.host(t, "a1", &fake{scripts: []script{cutAfter(0, reached)}}, opt)
		if err := h.r.Recover(t.Context()); err != nil {
			t.Fatal(err)
		}
		wait(t, reached)
		h.r.Close()
	}
	p := &fake{scripts: []script{failWith(errNotCalled)}}
	recoverHost(t, e, "a1", p, opt)
	if p.Calls() != 0 {
		t.Fatal("provider called after the budget was spent")
	}
	tr := lastTurn(t, e, "a1")
	if tr.Status != chat.TurnFailed || !strings.Contains(tr.Error, "recovery attempts exhausted") {
		t.Fatalf("turn = %+v", tr)
	}
	info := streamInfo(t, e, "a1", turn.StreamID)
	if info.Status != chunk.StatusError || !strings.Contains(info.Error, "recovery attempts exhausted") {
		t.Fatalf("stream = %+v", info)
	}
	st, err := e.host(t, "a1", p, nil).a.Status()
	if err != nil || st.ActiveTurn != nil || st.LastStream == nil || st.LastStream.Status != chunk.StatusError {
		t.Fatalf("status = %+v %v", st, err)
	}
	if rows := runs(t, e, "a1"); len(rows) != 0 {
		t.Fatalf("runs table: %+v", rows)
	}
}

func TestRecoverHonoursCancel(t *testing.T) {
	e := newEnv(t)
	turn := crash(t, e, "a1", "tell me a story", 3)
	// Between the crash and the recovery, a client stops the turn.
	h := e.host(t, "a1", &fake{scripts: []script{failWith(errNotCalled)}}, nil)
	if ok, err := h.a.Cancel(t.Context()); !ok || err != nil {
		t.Fatalf("cancel an orphaned turn: %v %v", ok, err)
	}
	if err := h.r.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnInterrupted {
		t.Fatalf("turn = %+v", tr)
	}
	if info := streamInfo(t, e, "a1", turn.StreamID); info.Status != chunk.StatusAborted {
		t.Fatalf("stream = %+v", info)
	}
}

func TestContinueLastTurn(t *testing.T) {
	e := newEnv(t)
	const prompt = "tell me a story"
	// A turn cancelled part way leaves a partial assistant message.
	reached := make(chan struct{}, 1)
	h := e.host(t, "a1", &fake{scripts: []script{cutAfter(4, reached), passLocal()}}, nil)
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: prompt}); err != nil {
		t.Fatal(err)
	}
	wait(t, reached)
	if _, err := h.a.Cancel(t.Context()); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	turn, err := h.a.ContinueLastTurn(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	msgs := settled(t, e, "a1")
	if len(msgs) != 2 || msgs[1].Text() != answer(prompt) || msgs[1].ID != turn.MessageID {
		t.Fatalf("messages = %+v", msgs)
	}
	cs, _ := streamOf(t, e.lg, "a1", turn.StreamID)
	if cs[0].Type != chunk.Start || cs[0].MessageID != msgs[1].ID || cs[len(cs)-1].Type != chunk.Finish {
		t.Fatalf("continuation stream %+v ... %+v", cs[0], cs[len(cs)-1])
	}
}

// TestRecoverEmptyDecisionKeepsToolResults: a {} decision leaves the
// history alone, except that a partial holding settled tool results is
// stored anyway: the calls ran, and the conversation says so.
func TestRecoverEmptyDecisionKeepsToolResults(t *testing.T) {
	e := newEnv(t)
	fx := newSideEffects()
	tools := withTools(t, fx.tool(t, "safe", chat.Idempotent), fx.tool(t, "risky", chat.Unsafe))
	reached := make(chan struct{}, 1)
	h := e.host(t, "a1", &fake{scripts: []script{passLocal(), passLocal(), cutAfter(3, reached)}}, tools)
	turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: twoTools})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, reached)
	h.r.Close()

	hooks := &hookLog{dec: chat.RecoveryDecision{}}
	p := &fake{scripts: []script{failWith(errNotCalled)}}
	recoverHost(t, e, "a1", p, func(c *chat.Config) {
		tools(c)
		c.OnChatRecovery = hooks.hook
	})
	if len(hooks.recs) != 1 {
		t.Fatalf("hook called %d times, want 1", len(hooks.recs))
	}
	if p.Calls() != 0 {
		t.Fatal("provider called without Continue")
	}
	if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnInterrupted {
		t.Fatalf("turn = %s, want interrupted", tr.Status)
	}
	msgs := settled(t, e, "a1")
	if len(msgs) != 2 || msgs[1].Role != chat.RoleAssistant || msgs[1].ID != turn.MessageID {
		t.Fatalf("messages = %+v, want the user's and the partial answer", msgs)
	}
	parts := toolParts(msgs[1])
	if len(parts) != 2 {
		t.Fatalf("stored tool parts = %+v, want the two calls", parts)
	}
	for _, part := range parts {
		if part.State != chat.ToolOutput || len(part.Output) == 0 {
			t.Errorf("stored %s call: state %q output %s, want its output", part.ToolName, part.State, part.Output)
		}
	}
}

// TestRecoverCancelledBeforeStart: a turn whose process died before its
// stream's first chunk was stored, then cancelled, ends its stream with
// the start chunk before the abort, so a client reading the stream sees it
// start (verify's stream-start rule; a 6-node chaos run found a stream
// that held the abort alone).
func TestRecoverCancelledBeforeStart(t *testing.T) {
	e := newEnv(t)
	// The first incarnation dies while its turn writes the start chunk.
	stuck := &stuckChunks{reached: make(chan struct{})}
	e.chunks = stuck
	first := e.host(t, "a1", &fake{scripts: []script{failWith(errNotCalled)}}, nil)
	turn, err := first.a.Send(t.Context(), chat.SendRequest{Text: "tell me a story", Body: []byte(`{"model":"x"}`)})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, stuck.reached)
	first.r.Close()
	e.chunks = nil
	if cs, _ := streamOf(t, e.lg, "a1", turn.StreamID); len(cs) != 0 {
		t.Fatalf("%d chunks stored before the crash, want none", len(cs))
	}
	h := e.host(t, "a1", &fake{scripts: []script{failWith(errNotCalled)}}, nil)
	if ok, err := h.a.Cancel(t.Context()); !ok || err != nil {
		t.Fatalf("cancel an orphaned turn: %v %v", ok, err)
	}
	if err := h.r.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	cs, _ := streamOf(t, e.lg, "a1", turn.StreamID)
	if len(cs) == 0 || cs[0].Type != chunk.Start || count(cs, chunk.Start) != 1 || cs[len(cs)-1].Type != chunk.Abort {
		var types []string
		for _, c := range cs {
			types = append(types, c.Type)
		}
		t.Fatalf("stream chunks %v, want start first and abort last", types)
	}
	if info := streamInfo(t, e, "a1", turn.StreamID); info.Status != chunk.StatusAborted {
		t.Fatalf("stream = %+v", info)
	}
}

// stuckChunks is the chunk batcher of a process that dies while writing
// its first chunk: Add blocks until the caller's ctx ends (the process
// stops) and stores nothing.
type stuckChunks struct {
	reached chan struct{}
	once    sync.Once
}

func (s *stuckChunks) Add(ctx context.Context, _ eventlog.Event, _ ...eventlog.AddOption) (*eventlog.Pending, error) {
	s.once.Do(func() { close(s.reached) })
	<-ctx.Done()
	return nil, ctx.Err()
}

func (s *stuckChunks) Replace(*eventlog.Pending, json.RawMessage) (bool, error) {
	return false, errDead
}
