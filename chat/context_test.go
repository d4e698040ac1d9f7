package chat_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
)

// contextBudget is the budget of the tests below: a few of their turns.
const contextBudget = 1200

// longMessage is the i-th user message of a long conversation, about 100
// tokens.
func longMessage(i int) string {
	return fmt.Sprintf("message %02d %s", i, strings.Repeat("words that take room ", 19))
}

func withBudget(budget int) func(*chat.Config) {
	return func(c *chat.Config) { c.ContextTokens = budget }
}

// talk sends the user messages from..to-1 on h, each turn to its end.
func talk(t *testing.T, h *host, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: longMessage(i)}); err != nil {
			t.Fatal(err)
		}
		h.r.Wait()
	}
}

// summaryRequests splits what p was asked into summary requests and model
// calls of turns.
func summaryRequests(p *fake) (summaries, calls []llm.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.reqs {
		if n := len(r.Messages); n > 0 && r.Messages[n-1].PlainText() == llm.SummarizePrompt {
			summaries = append(summaries, r)
		} else {
			calls = append(calls, r)
		}
	}
	return summaries, calls
}

func summarizedEvents(t *testing.T, e *env, agent string) []eventlog.Event {
	t.Helper()
	evs, err := e.lg.Read(t.Context(), eventlog.Filter{Agent: agent}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []eventlog.Event
	for _, ev := range evs {
		if ev.Type == chat.EventContextSummarized {
			out = append(out, ev)
		}
	}
	return out
}

// checkFits checks the model call req of the last turn against the stored
// conversation msgs and summary: the system prompt holds the summary, and
// the messages are the newest after it, within the budget, ending with the
// turn's user message.
func checkFits(t *testing.T, req llm.Request, msgs []chat.Message, sum chat.Summary) {
	t.Helper()
	if want := chat.SummaryHeader + sum.Text; req.System != want {
		t.Errorf("system = %q, want %q", req.System, want)
	}
	upto := -1
	for i, m := range msgs {
		if m.ID == sum.Upto {
			upto = i
		}
	}
	if upto < 0 {
		t.Fatalf("the summary's message %s is not in the conversation", sum.Upto)
	}
	// The user messages of the conversation are the sent messages' texts,
	// so the sent messages are a suffix of it.
	sent := req.Messages
	if len(sent) == 0 || len(sent) > len(msgs)-upto-1 {
		t.Fatalf("%d messages sent, %d after the summary", len(sent), len(msgs)-upto-1)
	}
	tail := msgs[len(msgs)-len(sent):]
	used := llm.EstimateTokens(req.System)
	for i, m := range tail {
		if sent[i].PlainText() != m.Text() {
			t.Errorf("message %d sent = %.40q, want %.40q", i, sent[i].PlainText(), m.Text())
		}
		used += chat.MessageTokens(m)
	}
	if used > contextBudget {
		t.Errorf("the call used %d tokens, over the budget of %d", used, contextBudget)
	}
	if sent[0].Role != llm.RoleUser || sent[len(sent)-1].PlainText() != tail[len(tail)-1].Text() {
		t.Errorf("sent messages start with %s, end with %.40q", sent[0].Role, sent[len(sent)-1].PlainText())
	}
}

// TestContextBudget: a conversation past its context budget sends the
// model the system prompt with a summary, made by the model and stored,
// and the newest messages that fit; the conversation stays whole, and a
// summary is reused until the next one is due.
func TestContextBudget(t *testing.T) {
	e := newEnv(t)
	p := &fake{scripts: []script{passLocal()}}
	h := e.host(t, "a1", p, withBudget(contextBudget))
	const turns = 16
	talk(t, h, 0, turns)

	msgs := settled(t, e, "a1")
	if len(msgs) != 2*turns {
		t.Fatalf("%d messages stored, want %d: the conversation stays whole", len(msgs), 2*turns)
	}
	summaries, calls := summaryRequests(p)
	evs := summarizedEvents(t, e, "a1")
	if len(summaries) < 2 || len(summaries) != len(evs) || len(summaries) >= turns/2 {
		t.Fatalf("%d summary requests, %d context.summarized in %d turns: want a few, each stored once",
			len(summaries), len(evs), turns)
	}
	if len(calls) != turns {
		t.Fatalf("%d model calls of turns, want %d", len(calls), turns)
	}
	t.Logf("%d turns: %d summaries; the last call got %d of %d messages", turns, len(summaries),
		len(calls[len(calls)-1].Messages), len(msgs)-1)
	sum, ok, err := e.store.Summary("a1")
	if err != nil || !ok {
		t.Fatalf("summary: %v %v", ok, err)
	}
	// The local model's summary names what it was given: exactly the
	// messages of the last summary request.
	last := summaries[len(summaries)-1]
	if want := llm.LocalSummary(last.Messages[:len(last.Messages)-1]); sum.Text != want {
		t.Errorf("summary = %q, want %q", sum.Text, want)
	}
	// The later summary is made of the earlier one and what followed it.
	if first := last.Messages[0].PlainText(); !strings.HasPrefix(first, chat.SummaryHeader+"Summary of ") {
		t.Errorf("the second summary request starts with %.60q, not the first summary", first)
	}
	if sum.Tokens != llm.EstimateTokens(sum.Text) || sum.RequestID == "" {
		t.Errorf("summary = %+v", sum)
	}
	checkFits(t, calls[len(calls)-1], msgs[:len(msgs)-1], sum)
	if n := len(calls[len(calls)-1].Messages); n < 3 {
		t.Errorf("the last call got %d messages, want the newest that fit (3 or more)", n)
	}
	// The first turns fit: their calls got everything.
	if c := calls[0]; c.System != "" || len(c.Messages) != 1 {
		t.Errorf("first call: system %q, %d messages", c.System, len(c.Messages))
	}
}

// TestContextSummaryHook: Config.Summarize replaces the model's summary.
func TestContextSummaryHook(t *testing.T) {
	e := newEnv(t)
	p := &fake{scripts: []script{passLocal()}}
	var got [][]chat.Message
	h := e.host(t, "a1", p, func(c *chat.Config) {
		c.ContextTokens = contextBudget
		c.Summarize = func(_ context.Context, msgs []chat.Message) (string, error) {
			got = append(got, msgs)
			return fmt.Sprintf("my own summary of %d messages", len(msgs)), nil
		}
	})
	talk(t, h, 0, 10)
	summaries, calls := summaryRequests(p)
	if len(summaries) != 0 || len(got) == 0 {
		t.Fatalf("%d summary requests to the model, %d to the hook", len(summaries), len(got))
	}
	sum, ok, err := e.store.Summary("a1")
	if err != nil || !ok {
		t.Fatalf("summary: %v %v", ok, err)
	}
	if want := fmt.Sprintf("my own summary of %d messages", len(got[len(got)-1])); sum.Text != want {
		t.Errorf("summary %q, want %q", sum.Text, want)
	}
	msgs := settled(t, e, "a1")
	checkFits(t, calls[len(calls)-1], msgs[:len(msgs)-1], sum)
}

// TestContextSummaryCrash: a process that dies after the summary is made
// and before it is stored does not make it again: the recovered turn
// reuses the recorded result, stores it once and sends it to the model.
func TestContextSummaryCrash(t *testing.T) {
	e := newEnv(t)
	// A conversation over the budget, made without one.
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), withBudget(-1))
	const turns = 8
	talk(t, h, 0, turns)
	h.r.Close()

	p := &fake{scripts: []script{passLocal()}}
	h = e.host(t, "a1", p, withBudget(contextBudget))
	reached := make(chan struct{}, 1)
	chat.StopAt(h.a, func(ctx context.Context, point string) error {
		if point != "summary-recorded" {
			return nil
		}
		reached <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: longMessage(turns)}); err != nil {
		t.Fatal(err)
	}
	wait(t, reached)
	h.r.Close()
	if summaries, calls := summaryRequests(p); len(summaries) != 1 || len(calls) != 0 {
		t.Fatalf("before the crash: %d summary requests, %d calls; want 1, 0", len(summaries), len(calls))
	}
	if evs := summarizedEvents(t, e, "a1"); len(evs) != 0 {
		t.Fatalf("%d context.summarized before the crash, want 0", len(evs))
	}

	p2 := &fake{scripts: []script{passLocal()}}
	recoverHost(t, e, "a1", p2, withBudget(contextBudget))
	if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnCompleted {
		t.Fatalf("turn = %s %q", tr.Status, tr.Error)
	}
	summaries, calls := summaryRequests(p2)
	if len(summaries) != 0 || len(calls) != 1 {
		t.Fatalf("after the crash: %d summary requests, %d calls; want 0, 1 (the summary is not made twice)", len(summaries), len(calls))
	}
	if evs := summarizedEvents(t, e, "a1"); len(evs) != 1 {
		t.Fatalf("%d context.summarized, want 1", len(evs))
	}
	sum, ok, err := e.store.Summary("a1")
	if err != nil || !ok {
		t.Fatalf("summary: %v %v", ok, err)
	}
	first, _ := summaryRequests(p)
	if want := llm.LocalSummary(first[0].Messages[:len(first[0].Messages)-1]); sum.Text != want {
		t.Errorf("summary = %q, want %q", sum.Text, want)
	}
	msgs := settled(t, e, "a1")
	if len(msgs) != 2*(turns+1) {
		t.Fatalf("%d messages, want %d", len(msgs), 2*(turns+1))
	}
	checkFits(t, calls[0], msgs[:len(msgs)-1], sum)
}

// TestContextSummaryHookGetsCopies: the messages Config.Summarize gets are
// its own to change. The model call reads the conversation with its parts
// shared with the Store's history cache (historyShared); a hook that wrote
// into them would change what every later History returns.
func TestContextSummaryHookGetsCopies(t *testing.T) {
	e := newEnv(t)
	p := &fake{scripts: []script{passLocal()}}
	calls := 0
	h := e.host(t, "a1", p, func(c *chat.Config) {
		c.ContextTokens = contextBudget
		c.Summarize = func(_ context.Context, msgs []chat.Message) (string, error) {
			calls++
			for _, m := range msgs {
				for i := range m.Parts {
					m.Parts[i].Text = "changed by the hook"
				}
			}
			return "a summary", nil
		}
	})
	talk(t, h, 0, 10)
	if calls == 0 {
		t.Fatal("the hook was not called")
	}
	got, err := e.store.History("a1")
	if err != nil {
		t.Fatal(err)
	}
	want, err := e.store.HistoryUncached("a1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("History after the hook changed its messages differs from the stored rows")
	}
	for _, m := range got {
		for _, p := range m.Parts {
			if p.Text == "changed by the hook" {
				t.Fatalf("message %s holds the hook's change", m.ID)
			}
		}
	}
}
