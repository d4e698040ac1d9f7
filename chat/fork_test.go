package chat_test

import (
	"slices"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/eventlog"
)

// A fork's messages are its parent's up to the cut, from one agent.forked
// event; its model input holds them; new chats on each diverge; the view
// rebuilt from the log agrees; the parent's rewrites of what the forks
// inherited leave the forks as they were; and once the fork is compacted
// (as agentd does before the parent's delete), the parent's delete leaves
// the fork whole, in the live view and in a rebuilt one, and the log
// verifies.
func TestFork(t *testing.T) {
	e := newEnv(t)
	parent := e.host(t, "p1", &fake{scripts: []script{passLocal()}}, nil)
	for _, text := range []string{"one", "two"} {
		if _, err := parent.a.Send(t.Context(), chat.SendRequest{Text: text}); err != nil {
			t.Fatal(err)
		}
		parent.r.Wait()
	}
	pmsgs := settled(t, e, "p1")
	if len(pmsgs) != 4 {
		t.Fatalf("parent has %d messages, want 4", len(pmsgs))
	}
	ids := func(ms []chat.Message) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.ID)
		}
		return out
	}

	if _, err := e.store.ForkPoint("p1", "no-such-message"); err == nil {
		t.Fatal("ForkPoint of an unknown message: no error")
	}
	at := pmsgs[1].ID
	n, err := e.store.ForkPoint("p1", at)
	if err != nil || n != 2 {
		t.Fatalf("ForkPoint(at) = %d, %v; want 2", n, err)
	}
	for _, f := range []struct {
		id, at string
		want   []chat.Message
	}{{"f1", at, pmsgs[:2]}, {"f2", "", pmsgs}} {
		n, err := e.store.ForkPoint("p1", f.at)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := eventlog.NewEvent(f.id, eventlog.TypeForked, eventlog.Forked{Parent: "p1", At: f.at, Messages: n})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.lg.Append(t.Context(), ev, eventlog.ExpectSeq(0)); err != nil {
			t.Fatal(err)
		}
		if got, want := ids(settled(t, e, f.id)), ids(f.want); !slices.Equal(got, want) {
			t.Fatalf("fork %s: messages %v, want %v", f.id, got, want)
		}
	}
	forks, err := e.store.Forks("p1")
	if err != nil || len(forks) != 2 || forks[0].Agent != "f1" || forks[1].Agent != "f2" || forks[0].Seq == 0 {
		t.Fatalf("Forks = %v, %v", forks, err)
	}

	p := &fake{scripts: []script{passLocal()}}
	fork := e.host(t, "f1", p, nil)
	if _, err := fork.a.Send(t.Context(), chat.SendRequest{Text: "three"}); err != nil {
		t.Fatal(err)
	}
	fork.r.Wait()
	if _, err := parent.a.Send(t.Context(), chat.SendRequest{Text: "four"}); err != nil {
		t.Fatal(err)
	}
	parent.r.Wait()
	if got := len(p.reqs[0].Messages); got < 3 {
		t.Fatalf("the fork's model input has %d messages, want the 2 inherited and its own", got)
	}
	fmsgs := settled(t, e, "f1")
	if got, want := ids(fmsgs[:2]), ids(pmsgs[:2]); len(fmsgs) != 4 || !slices.Equal(got, want) {
		t.Fatalf("fork's messages %v, want %v and 2 of its own", ids(fmsgs), want)
	}
	if fmsgs[2].Text() != "three" || fmsgs[3].Text() == "" || fmsgs[3].ID == pmsgs[3].ID {
		t.Fatalf("fork's own messages: %q, %q", fmsgs[2].Text(), fmsgs[3].Text())
	}
	if got := settled(t, e, "p1"); len(got) != 6 || got[4].Text() != "four" {
		t.Fatalf("parent's messages after both chats: %v", ids(got))
	}
	if got, want := ids(rebuiltMessages(t, e, "f1")), ids(fmsgs); !slices.Equal(got, want) {
		t.Fatalf("rebuilt fork: %v, want %v", got, want)
	}

	checkVerify(t, e.lg)

	// The parent rewrites what the forks inherited (a message's parts
	// replaced, a rollback's truncation): the forks keep what they had.
	f2msgs := settled(t, e, "f2")
	for _, ev := range []struct {
		typ  string
		data any
	}{
		{chat.EventMessageUpdated, map[string]any{"id": pmsgs[1].ID, "parts": []map[string]string{{"type": "text", "text": "rewritten"}}}},
		{chat.EventMessagesTruncated, map[string]string{"afterId": pmsgs[0].ID}},
	} {
		ev, err := eventlog.NewEvent("p1", ev.typ, ev.data)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.lg.Append(t.Context(), ev); err != nil {
			t.Fatal(err)
		}
	}
	if got := settled(t, e, "p1"); len(got) != 1 {
		t.Fatalf("parent after its truncation: %v", ids(got))
	}
	for _, f := range []struct {
		id   string
		want []chat.Message
	}{{"f1", fmsgs}, {"f2", f2msgs}} {
		got := settled(t, e, f.id)
		if !slices.Equal(ids(got), ids(f.want)) || got[1].Text() != f.want[1].Text() {
			t.Fatalf("fork %s after its parent's rewrite: %v, want %v", f.id, ids(got), ids(f.want))
		}
		if rebuilt := rebuiltMessages(t, e, f.id); !slices.Equal(ids(rebuilt), ids(f.want)) || rebuilt[1].Text() != f.want[1].Text() {
			t.Fatalf("fork %s rebuilt after its parent's rewrite: %v, want %v", f.id, ids(rebuilt), ids(f.want))
		}
	}

	for _, id := range []string{"f1", "f2"} {
		if _, err := e.lg.Compact(t.Context(), id); err != nil {
			t.Fatalf("compact %s: %v", id, err)
		}
	}
	if _, err := e.lg.Delete(t.Context(), "p1"); err != nil {
		t.Fatal(err)
	}
	if got := settled(t, e, "p1"); len(got) != 0 {
		t.Fatalf("deleted parent has %d messages", len(got))
	}
	if got, want := ids(settled(t, e, "f1")), ids(fmsgs); !slices.Equal(got, want) {
		t.Fatalf("fork after the parent's delete: %v, want %v", got, want)
	}
	if got, want := ids(rebuiltMessages(t, e, "f1")), ids(fmsgs); !slices.Equal(got, want) {
		t.Fatalf("fork rebuilt after the parent's delete: %v, want %v", got, want)
	}
	if got, want := ids(rebuiltMessages(t, e, "f2")), ids(f2msgs); !slices.Equal(got, want) {
		t.Fatalf("whole fork rebuilt after the parent's delete: %v, want %v", got, want)
	}
	checkVerify(t, e.lg)
}
