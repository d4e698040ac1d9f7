package chat_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/verify"
)

// atFormat returns a host option that writes a turn's end at record format
// 8 (end records) or 7.
func atFormat(endRecords bool) func(*chat.Config) {
	return func(c *chat.Config) {
		c.EndRecordsWritable = func() bool { return endRecords }
		c.InlineEndsWritable = func() bool { return false } // format 10 and before
	}
}

// endShape is what a test reads of an agent's stored events: the count of
// each type, the assistant message.appended count, and the last
// turn.completed's data.
type endShape struct {
	types     map[string]int
	assistant int
	completed struct {
		RequestID string          `json:"requestId"`
		Message   *chat.Message   `json:"message"`
		Usage     json.RawMessage `json:"usage"`
	}
	last []string // the types of the last two events
	// carried counts the events that carry a fiber's end (record format
	// 11): the fiber.completed records they stand for are not in types.
	carried int
}

func readShape(t *testing.T, e *env, agent string) endShape {
	t.Helper()
	evs, err := e.lg.Read(t.Context(), eventlog.Filter{Agent: agent}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := endShape{types: map[string]int{}}
	for _, ev := range evs {
		s.types[ev.Type]++
		if ev.Completes != "" {
			s.carried++
		}
		switch ev.Type {
		case chat.EventMessageAppended:
			var m chat.Message
			if json.Unmarshal(ev.Data, &m) == nil && m.Role == chat.RoleAssistant {
				s.assistant++
			}
		case chat.EventTurnCompleted:
			if err := json.Unmarshal(ev.Data, &s.completed); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, ev := range evs[max(0, len(evs)-2):] {
		s.last = append(s.last, ev.Type)
	}
	return s
}

// views is what the views say of an agent's one turn.
type views struct {
	texts  []string
	usage  chat.Usage
	turn   chat.TurnUsage
	spent  chat.BudgetSpend
	status string
}

func readViews(t *testing.T, e *env, agent string) views {
	t.Helper()
	var v views
	for _, m := range settled(t, e, agent) {
		v.texts = append(v.texts, string(m.Role)+": "+m.Text())
	}
	tr := lastTurn(t, e, agent)
	v.status = tr.Status + " " + tr.FinishReason
	var err error
	if v.usage, err = e.store.Usage(agent); err != nil {
		t.Fatal(err)
	}
	tu, ok, err := e.store.TurnUsage(agent, tr.RequestID)
	if err != nil || !ok {
		t.Fatalf("turn usage: %v %v", ok, err)
	}
	v.turn = tu
	if v.spent, err = e.store.BudgetSpend(agent, time.Time{}); err != nil {
		t.Fatal(err)
	}
	return v
}

func (v views) equal(w views) bool {
	if len(v.texts) != len(w.texts) {
		return false
	}
	for i := range v.texts {
		if v.texts[i] != w.texts[i] {
			return false
		}
	}
	return v.usage == w.usage && v.spent == w.spent && v.status == w.status &&
		v.turn.Input == w.turn.Input && v.turn.Output == w.turn.Output
}

// TestEndRecordsByFormat: the record format decides the end chain a
// completed turn stores. At format 7 (Config.EndRecordsWritable false) it
// is the assistant's message.appended, usage.recorded, turn.completed
// (without message or usage) and fiber.completed; at format 8 it is
// turn.completed carrying the message and the usage, then
// fiber.completed: no message.appended of the answer, no usage.recorded.
// Every view (history, turn, usage roll-up, the turn's usage, budget
// spend) reads the same either way, and verify finds nothing wrong.
func TestEndRecordsByFormat(t *testing.T) {
	e := newEnv(t)
	local := llm.NewLocal(llm.LocalConfig{Rate: -1})
	got := map[bool]views{}
	for _, format8 := range []bool{false, true} {
		agent := "f7"
		if format8 {
			agent = "f8"
		}
		h := e.host(t, agent, local, atFormat(format8))
		if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "hello"}); err != nil {
			t.Fatal(err)
		}
		h.r.Wait()
		got[format8] = readViews(t, e, agent)
		s := readShape(t, e, agent)
		if len(s.last) != 2 || s.last[0] != chat.EventTurnCompleted || s.last[1] != fiber.EventCompleted {
			t.Errorf("%s: last events %v, want turn.completed, fiber.completed", agent, s.last)
		}
		if s.types[chat.EventTurnCompleted] != 1 || s.types[fiber.EventCompleted] != 1 {
			t.Errorf("%s: events %v, want one turn.completed and one fiber.completed", agent, s.types)
		}
		c := s.completed
		if !format8 {
			if s.assistant != 1 || s.types[chat.EventUsageRecorded] != 1 || c.Message != nil || c.Usage != nil {
				t.Errorf("format 7: %d assistant message.appended, %d usage.recorded, turn.completed message %v usage %s; want 1, 1, none, none",
					s.assistant, s.types[chat.EventUsageRecorded], c.Message, c.Usage)
			}
			continue
		}
		if s.assistant != 0 || s.types[chat.EventUsageRecorded] != 0 {
			t.Errorf("format 8: %d assistant message.appended, %d usage.recorded; want none (in turn.completed)",
				s.assistant, s.types[chat.EventUsageRecorded])
		}
		if c.Message == nil || c.Message.Role != chat.RoleAssistant || c.Message.Text() == "" || c.Usage == nil {
			t.Errorf("format 8: turn.completed message %+v usage %s; want the answer and its usage", c.Message, c.Usage)
		}
	}
	if !got[false].equal(got[true]) {
		t.Errorf("views differ by format:\n7: %+v\n8: %+v", got[false], got[true])
	}
	if v := got[true]; len(v.texts) != 2 || v.usage.Turns != 1 || v.usage.Output == 0 || v.spent.Tokens == 0 {
		t.Errorf("views at format 8: %+v, want the question, its answer and the turn's usage", v)
	}
	rep, err := verify.Check(t.Context(), e.lg, verify.Options{})
	if err != nil || len(rep.Violations) != 0 {
		t.Errorf("verify: %v\n%s", err, rep)
	}
}

// TestSplitEnd: SplitEnd reads a turn.completed of format 8 as the three
// records of format 7 it stands for, and leaves every other event alone.
func TestSplitEnd(t *testing.T) {
	e := newEnv(t)
	local := llm.NewLocal(llm.LocalConfig{Rate: -1})
	h := e.host(t, "a1", local, atFormat(true))
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	evs, err := e.lg.Read(t.Context(), eventlog.Filter{Agent: "a1"}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range evs {
		for _, x := range chat.SplitEnd(ev) {
			types = append(types, x.Type)
		}
	}
	n := len(types)
	want := []string{chat.EventMessageAppended, chat.EventUsageRecorded, chat.EventTurnCompleted, fiber.EventCompleted}
	if n < len(want) {
		t.Fatalf("split events %v", types)
	}
	for i, w := range want {
		if types[n-len(want)+i] != w {
			t.Fatalf("split events end %v, want %v", types[n-len(want):], want)
		}
	}
}

// endCutLog stores a turn's end chain but its last record (the fiber's
// fiber.completed) and then blocks until the process is "killed": the
// crash between the two records of a format 8 end chain, where
// turn.completed (with the answer and the usage) is durable and the fiber
// is not over.
type endCutLog struct {
	*eventlog.Log
	reached chan struct{}
}

func (l *endCutLog) AppendAll(ctx context.Context, evs []eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	n := len(evs)
	if n < 2 || evs[n-1].Type != fiber.EventCompleted || evs[n-2].Type != chat.EventTurnCompleted {
		return l.Log.AppendAll(ctx, evs, opts...)
	}
	if _, err := l.Log.AppendAll(ctx, evs[:n-1]); err != nil {
		return 0, err
	}
	l.reached <- struct{}{}
	<-ctx.Done()
	return 0, errors.Join(ctx.Err(), errors.New("killed after turn.completed"))
}

// TestEndChainCutCrash: killed between a completed turn's turn.completed
// and its fiber's fiber.completed (the end chain cut after its first
// record, at either format), a new incarnation completes the fiber and
// writes no second outcome: one turn.completed, one fiber.completed, the
// question and its answer once, the usage and the budget spend equal to
// an uncut turn's, and verify clean.
func TestEndChainCutCrash(t *testing.T) {
	for _, format8 := range []bool{false, true} {
		name := "format7"
		if format8 {
			name = "format8"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			local := llm.NewLocal(llm.LocalConfig{Rate: -1})
			clean := e.host(t, "clean", local, atFormat(format8))
			if _, err := clean.a.Send(t.Context(), chat.SendRequest{Text: "tell me a story"}); err != nil {
				t.Fatal(err)
			}
			clean.r.Wait()
			want := readViews(t, e, "clean")

			cut := &endCutLog{Log: e.lg, reached: make(chan struct{}, 1)}
			e.writes = cut
			h := e.host(t, "a1", local, atFormat(format8))
			if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "tell me a story"}); err != nil {
				t.Fatal(err)
			}
			wait(t, cut.reached)
			h.r.Close()
			e.writes = nil
			if s := readShape(t, e, "a1"); s.types[fiber.EventCompleted] != 0 || s.types[chat.EventTurnCompleted] != 1 {
				t.Fatalf("at the cut: events %v, want turn.completed stored and no fiber.completed", s.types)
			}

			recoverHost(t, e, "a1", local, atFormat(format8))
			got := readViews(t, e, "a1")
			if !got.equal(want) {
				t.Errorf("after recovery: %+v\nuncut: %+v", got, want)
			}
			s := readShape(t, e, "a1")
			if s.types[chat.EventTurnCompleted] != 1 || s.types[fiber.EventCompleted] != 1 || s.types[chat.EventTurnFailed] != 0 {
				t.Errorf("events %v, want one turn.completed, one fiber.completed, no turn.failed", s.types)
			}
			if rows := runs(t, e, "a1"); len(rows) != 0 {
				t.Errorf("fibers left: %+v", rows)
			}
			rep, err := verify.Check(t.Context(), e.lg, verify.Options{})
			if err != nil || len(rep.Violations) != 0 {
				t.Errorf("verify: %v\n%s", err, rep)
			}
		})
	}
}
