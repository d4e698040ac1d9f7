package eventlog_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/waitfor"
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

// TestAppendAllInterleaved: many agents' AppendAll chains on the shared
// stream break each other's chains (pipelined) or share the group
// commit's atomic batches (atomic); each still stores all its events, in
// order, once, fenced or not, and returns the sequence of its last. In an
// atomic batch a chain's events are side by side.
func TestAppendAllInterleaved(t *testing.T) {
	for _, how := range []string{"pipelined", "atomic"} {
		for _, fenced := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/fenced=%v", how, fenced), func(t *testing.T) {
				ctx := t.Context()
				nd := openNodes(t, 1)[0]
				lg := nd.lg
				if !fenced {
					lg = eventlogtest.OpenOn(t, eventlogtest.RunServer(t, eventlogtest.ServerOptions{}), eventlog.Config{})
				}
				eventlog.ForceSend(lg, how)
				const agents, rounds, per = 16, 5, 4
				errs := make(chan error, agents)
				lasts := make([][]eventlog.Seq, agents)
				for a := range agents {
					agent := fmt.Sprintf("x%d", a)
					nd.owner.set(agent, eventlog.Token{Node: "a", Epoch: 1})
					go func() {
						for range rounds {
							last, err := lg.AppendAll(ctx, notes(agent, per))
							if err != nil {
								errs <- fmt.Errorf("%s: %w", agent, err)
								return
							}
							lasts[a] = append(lasts[a], last)
						}
						errs <- nil
					}()
				}
				for range agents {
					if err := <-errs; err != nil {
						t.Fatal(err)
					}
				}
				for a := range agents {
					evs, err := lg.Read(ctx, eventlog.Filter{Agent: fmt.Sprintf("x%d", a)}, 0, 0)
					if err != nil {
						t.Fatal(err)
					}
					if len(evs) != rounds*per {
						t.Fatalf("x%d: %d events, want %d", a, len(evs), rounds*per)
					}
					for i, e := range evs {
						if want := fmt.Sprintf(`{"i":%d}`, i%per); string(e.Data) != want {
							t.Fatalf("x%d event %d = %s, want %s", a, i, e.Data, want)
						}
						if how == "atomic" && i%per > 0 && e.Seq != evs[i-1].Seq+1 {
							t.Fatalf("x%d event %d at seq %d, after %d: a chain split in an atomic batch", a, i, e.Seq, evs[i-1].Seq)
						}
					}
					for r, last := range lasts[a] {
						if want := evs[(r+1)*per-1].Seq; last != want {
							t.Fatalf("x%d AppendAll %d returned seq %d, its last event is at %d", a, r, last, want)
						}
					}
				}
			})
		}
	}
}

// TestAppendAllFencedInGroup: a stale owner's AppendAll in one atomic
// group with other agents' AppendAlls and Appends fails alone with
// ErrFenced and stores none of its events; the others' are all stored, in
// order (the group is refused whole, then sent again one by one).
func TestAppendAllFencedInGroup(t *testing.T) {
	ctx := t.Context()
	nodes := openNodes(t, 2)
	a, b := nodes[0], nodes[1]
	eventlog.ForceSend(a.lg, "atomic")
	a.owner.set("stale", eventlog.Token{Node: "a", Epoch: 1})
	if _, err := appendNote(ctx, a.lg, "stale"); err != nil {
		t.Fatal(err)
	}
	b.owner.set("stale", eventlog.Token{Node: "b", Epoch: 2})
	if _, err := appendNote(ctx, b.lg, "stale"); err != nil {
		t.Fatal(err)
	}
	const agents, per = 4, 3
	for i := range agents {
		a.owner.set(fmt.Sprintf("y%d", i), eventlog.Token{Node: "a", Epoch: 1})
	}
	queued, release := eventlog.HoldAppends(a.lg)
	errs := make(chan error, agents+1)
	for i := range agents {
		agent := fmt.Sprintf("y%d", i)
		go func() {
			var err error
			if i%2 == 0 {
				_, err = appendNote(ctx, a.lg, agent)
			} else {
				_, err = a.lg.AppendAll(ctx, notes(agent, per))
			}
			errs <- err
		}()
	}
	go func() {
		_, err := a.lg.AppendAll(ctx, notes("stale", per))
		if !errors.Is(err, eventlog.ErrFenced) {
			err = fmt.Errorf("stale AppendAll: %v, want ErrFenced", err)
		} else {
			err = nil
		}
		errs <- err
	}()
	waitfor.True(t, "every append to queue", func() bool { return queued() >= agents+1 })
	release()
	for range agents + 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if evs, err := b.lg.Read(ctx, eventlog.Filter{Agent: "stale"}, 0, 0); err != nil || len(evs) != 2 {
		t.Fatalf("stale agent: %d events, %v; want the 2 from before the stale AppendAll", len(evs), err)
	}
	for i := range agents {
		want := 1
		if i%2 == 1 {
			want = per
		}
		evs, err := a.lg.Read(ctx, eventlog.Filter{Agent: fmt.Sprintf("y%d", i)}, 0, 0)
		if err != nil || len(evs) != want {
			t.Fatalf("y%d: %d events, %v; want %d", i, len(evs), err, want)
		}
		for j, e := range evs {
			if want > 1 && string(e.Data) != fmt.Sprintf(`{"i":%d}`, j) {
				t.Fatalf("y%d event %d = %s", i, j, e.Data)
			}
		}
	}
}

// TestAppendAllExpectSeq: ExpectSeq makes a chain conditional on the
// agent's last event, fenced or not, pipelined or as an atomic batch: a
// mismatch stores none of it (ErrConflict), a match all of it. A Writer's
// AppendAll is its agent's: an empty agent is filled in, another agent
// refused (ErrInvalid) with nothing stored.
func TestAppendAllExpectSeq(t *testing.T) {
	for _, fenced := range []bool{false, true} {
		for _, how := range []string{"pipelined", "atomic"} {
			t.Run(fmt.Sprintf("fenced=%v/%s", fenced, how), func(t *testing.T) {
				ctx := t.Context()
				var lg *eventlog.Log
				if fenced {
					nd := openNodes(t, 1)[0]
					nd.owner.set("x", eventlog.Token{Node: "a", Epoch: 1})
					lg = nd.lg
				} else {
					lg, _ = eventlogtest.Open(t, eventlog.Config{})
				}
				eventlog.ForceSend(lg, how)
				count := func(want int) {
					t.Helper()
					evs, err := lg.Read(ctx, eventlog.Filter{Agent: "x"}, 0, 0)
					if err != nil {
						t.Fatal(err)
					}
					if len(evs) != want {
						t.Fatalf("%d events stored, want %d", len(evs), want)
					}
				}
				first, err := appendNote(ctx, lg, "x")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := lg.AppendAll(ctx, notes("x", 2), eventlog.ExpectSeq(first-1)); !errors.Is(err, eventlog.ErrConflict) {
					t.Fatalf("AppendAll expecting %d, the last being %d: %v, want ErrConflict", first-1, first, err)
				}
				count(1)
				last, err := lg.AppendAll(ctx, notes("x", 2), eventlog.ExpectSeq(first))
				if err != nil {
					t.Fatal(err)
				}
				count(3)
				w := lg.Writer("x")
				if _, err := w.AppendAll(ctx, []eventlog.Event{{Type: "note.added"}, {Agent: "y", Type: "note.added"}}); !errors.Is(err, eventlog.ErrInvalid) {
					t.Fatalf("Writer AppendAll of another agent: %v, want ErrInvalid", err)
				}
				count(3)
				end, err := w.AppendAll(ctx, []eventlog.Event{{Type: "note.added", Data: []byte(`{}`)}, {Type: "note.added", Data: []byte(`{}`)}}, eventlog.ExpectSeq(last))
				if err != nil {
					t.Fatal(err)
				}
				count(5)
				if end <= last {
					t.Fatalf("Writer AppendAll ended at %d, after %d", end, last)
				}
			})
		}
	}
}
