package chat_test

import (
	"slices"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/verify"
)

// atInlineEnds runs an agent at record format 11 (inline true) or 10.
func atInlineEnds(inline bool) func(*chat.Config) {
	return func(c *chat.Config) {
		c.EndRecordsWritable = func() bool { return true }
		c.InlineEndsWritable = func() bool { return inline }
	}
}

// TestInlineEndsByFormat: the record format decides whether a completed
// turn's fiber ends in a record of its own. At format 10
// (Config.InlineEndsWritable false) the end chain is turn.completed, then
// fiber.completed; at format 11 it is one record, turn.completed carrying
// the fiber's end (Completes, fiber.Records), one record fewer. Every view
// reads the same either way (history, usage, budget, the turn, no fiber
// left running), fiber.Records then SplitEnd read both as the same
// records, and verify finds nothing wrong.
func TestInlineEndsByFormat(t *testing.T) {
	e := newEnv(t)
	local := llm.NewLocal(llm.LocalConfig{Rate: -1})
	got := map[bool]views{}
	records := map[bool]int{}
	split := map[bool][]string{}
	for _, inline := range []bool{false, true} {
		agent := "f10"
		if inline {
			agent = "f11"
		}
		h := e.host(t, agent, local, atInlineEnds(inline))
		if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "hello"}); err != nil {
			t.Fatal(err)
		}
		h.r.Wait()
		got[inline] = readViews(t, e, agent)
		if rows := runs(t, e, agent); len(rows) != 0 {
			t.Errorf("%s: fibers left running: %+v", agent, rows)
		}
		evs, err := e.lg.Read(t.Context(), eventlog.Filter{Agent: agent}, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		records[inline] = len(evs)
		for _, ev := range evs {
			for _, r := range fiber.Records(ev) {
				for _, x := range chat.SplitEnd(r) {
					split[inline] = append(split[inline], x.Type)
				}
			}
		}
		s := readShape(t, e, agent)
		last := evs[len(evs)-1]
		tr := lastTurn(t, e, agent)
		if !inline {
			if s.types[fiber.EventCompleted] != 1 || s.carried != 0 || s.last[1] != fiber.EventCompleted {
				t.Errorf("format 10: events %v, %d carried ends, last %v; want a fiber.completed of its own, last", s.types, s.carried, s.last)
			}
			continue
		}
		if s.types[fiber.EventCompleted] != 0 || s.carried != 1 || last.Type != chat.EventTurnCompleted || last.Completes != tr.FiberID || tr.FiberID == "" {
			t.Errorf("format 11: events %v, %d carried ends, last %s completing %q; want turn.completed last, carrying the end of fiber %q",
				s.types, s.carried, last.Type, last.Completes, tr.FiberID)
		}
	}
	if records[true] != records[false]-1 {
		t.Errorf("records: %d at format 11, %d at 10; want one fewer", records[true], records[false])
	}
	if !slices.Equal(split[true], split[false]) {
		t.Errorf("SplitEnd: format 11 reads as %v, format 10 as %v", split[true], split[false])
	}
	if !got[false].equal(got[true]) {
		t.Errorf("views differ by format:\n10: %+v\n11: %+v", got[false], got[true])
	}
	rep, err := verify.Check(t.Context(), e.lg, verify.Options{})
	if err != nil || len(rep.Violations) != 0 {
		t.Errorf("verify: %v\n%s", err, rep)
	}
}
