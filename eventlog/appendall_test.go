package eventlog_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/forever-agents/forever/eventlog"
)

func notes(agent string, n int) []eventlog.Event {
	evs := make([]eventlog.Event, n)
	for i := range evs {
		evs[i] = eventlog.Event{Agent: agent, Type: "note.added", Data: fmt.Appendf(nil, `{"i":%d}`, i)}
	}
	return evs
}

// TestAppendAll: the events are stored in order, one after another, sent
// pipelined or as an atomic batch, each with the writer's token; a stale
// owner's AppendAll is fenced on the first and stores none of them.
func TestAppendAll(t *testing.T) {
	for _, how := range []string{"pipelined", "atomic"} {
		t.Run(how, func(t *testing.T) {
			ctx := t.Context()
			nodes := openNodes(t, 2)
			a, b := nodes[0], nodes[1]
			eventlog.ForceSend(a.lg, how)
			a.owner.set("x", eventlog.Token{Node: "a", Epoch: 1})
			last, err := a.lg.AppendAll(ctx, notes("x", 3))
			if err != nil {
				t.Fatal(err)
			}
			evs, err := a.lg.Read(ctx, eventlog.Filter{Agent: "x"}, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != 3 || evs[2].Seq != last || evs[0].Seq != last-2 {
				t.Fatalf("stored %d events ending at %d, want 3 ending at %d, contiguous", len(evs), evs[len(evs)-1].Seq, last)
			}
			for i, e := range evs {
				if string(e.Data) != fmt.Sprintf(`{"i":%d}`, i) || e.Writer != (eventlog.Token{Node: "a", Epoch: 1}) {
					t.Errorf("event %d = %s by %v", i, e.Data, e.Writer)
				}
			}
			b.owner.set("x", eventlog.Token{Node: "b", Epoch: 2})
			if _, err := appendNote(ctx, b.lg, "x"); err != nil {
				t.Fatal(err)
			}
			if _, err := a.lg.AppendAll(ctx, notes("x", 3)); !errors.Is(err, eventlog.ErrFenced) {
				t.Fatalf("stale AppendAll: %v, want ErrFenced", err)
			}
			after, err := b.lg.Read(ctx, eventlog.Filter{Agent: "x"}, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(after) != 4 {
				t.Fatalf("%d events after the stale AppendAll, want 4: it stored some", len(after))
			}
			if _, err := a.lg.AppendAll(ctx, []eventlog.Event{{Agent: "x", Type: "note.added"}, {Agent: "y", Type: "note.added"}}); !errors.Is(err, eventlog.ErrInvalid) {
				t.Errorf("AppendAll of two agents: %v, want ErrInvalid", err)
			}
		})
	}
}
