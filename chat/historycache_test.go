package chat_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
)

// TestHistoryCacheEqualsDecoding: History through the history cache
// returns, byte for byte, what decoding every row gives, after each way
// an agent's rows change under a warm cache: turns with tool calls (the
// assistant message updated in place), a truncation followed by new
// messages at the same indexes, a compaction, a fork reading its
// parent's rows, and a delete after which the same id starts again. The
// cache is keyed by the rows' bytes; one keyed by index alone fails here.
func TestHistoryCacheEqualsDecoding(t *testing.T) {
	e := newEnv(t)
	fx := newSideEffects()
	tools := withTools(t, fx.tool(t, "safe", chat.Idempotent), fx.tool(t, "risky", chat.Unsafe))
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), tools)
	same := func(agent, what string) {
		t.Helper()
		settled(t, e, agent)
		// And the whole log: a parent's delete is on the parent's
		// subjects, not the fork's.
		last, err := e.lg.LastSeq(t.Context(), eventlog.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.store.WaitFor(t.Context(), last); err != nil {
			t.Fatal(err)
		}
		for range 2 { // the second read takes every row it can from the cache
			got, err := e.store.History(agent)
			if err != nil {
				t.Fatal(err)
			}
			want, err := e.store.HistoryUncached(agent)
			if err != nil {
				t.Fatal(err)
			}
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			if !bytes.Equal(g, w) {
				t.Fatalf("%s: history of %s through the cache\n got %s\nwant %s", what, agent, g, w)
			}
		}
	}
	send := func(text string) {
		t.Helper()
		if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: text}); err != nil {
			t.Fatal(err)
		}
		h.r.Wait()
	}
	for _, text := range []string{"zero", twoTools, "two"} {
		send(text)
		same("a1", "after a turn")
	}
	hits := e.store.HistoryCacheHits()
	if hits == 0 {
		t.Fatal("no row was taken from the cache")
	}

	msgs := settled(t, e, "a1")
	if err := h.a.Truncate(t.Context(), msgs[1].ID); err != nil {
		t.Fatal(err)
	}
	// No read in between: the cache still holds the cut messages' rows
	// at the indexes the next ones take.
	send("three, at the truncated messages' indexes")
	same("a1", "after a truncation and a new turn")

	if _, err := e.lg.Compact(t.Context(), "a1"); err != nil {
		t.Fatal(err)
	}
	same("a1", "after a compaction")
	send(twoTools)
	same("a1", "after a compaction and a new turn")

	msgs = settled(t, e, "a1")
	n, err := e.store.ForkPoint("a1", msgs[1].ID)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := eventlog.NewEvent("f1", eventlog.TypeForked, eventlog.Forked{Parent: "a1", At: msgs[1].ID, Messages: n})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.lg.Append(t.Context(), ev, eventlog.ExpectSeq(0)); err != nil {
		t.Fatal(err)
	}
	same("f1", "a fork")
	fork := e.host(t, "f1", llm.NewLocal(llm.LocalConfig{Rate: -1}), tools)
	if _, err := fork.a.Send(t.Context(), chat.SendRequest{Text: "on the fork"}); err != nil {
		t.Fatal(err)
	}
	fork.r.Wait()
	same("f1", "a fork after its own turn")

	if _, err := e.lg.Delete(t.Context(), "a1"); err != nil {
		t.Fatal(err)
	}
	same("f1", "a fork after its parent's delete")
	h.r.Close()
	h = e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), tools)
	send("again from nothing") // its rows at the deleted ones' indexes
	same("a1", "the same id after a delete")
	if e.store.HistoryCacheHits() <= hits {
		t.Fatal("no row taken from the cache after the first turns")
	}
}
