package chunk_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestDeletedAgentLeavesTheStreamsView: an agent's chunks tombstone
// (eventlog.Delete) takes every stream of the agent out of the streams
// view (rows, latest, the ended index retention reads), keeps the other
// agents' streams, ignores an expiry marker of an old stream that lands
// after it, and lets the id start new streams; a view rebuilt from the
// log agrees.
func TestDeletedAgentLeavesTheStreamsView(t *testing.T) {
	ctx := t.Context()
	lg, srv := eventlogtest.Open(t, eventlog.Config{})
	pr0, err := lg.NewProjector(chunk.StreamsProjection())
	if err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunProjector(t, pr0)
	v0, _ := lg.View(chunk.StreamsProjectionName)
	env := &retentionEnv{lg: lg, b: runBatcher(t, lg), pr: pr0, streams: chunk.NewStreams(v0)}
	env.write(t, "a", "s1", finished...)
	env.write(t, "a", "s2", finished...)
	env.write(t, "a/b", "s3", finished...) // under a's key prefix
	old, err := env.streams.Get("a", "s1")
	data, _ := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.lg.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	// Retention racing the delete: s1's expiry marker after the tombstone.
	if _, err := env.lg.Append(ctx, eventlog.Event{Agent: "a", Stream: "s1", Type: chunk.EventExpired, ID: "s1/expired", Data: data}); err != nil {
		t.Fatal(err)
	}
	env.caughtUp(t)
	check := func(t *testing.T, st *chunk.Streams, wantNew bool) {
		t.Helper()
		list, err := st.List("a")
		if err != nil {
			t.Fatal(err)
		}
		var mine []string
		for _, info := range list {
			if info.Agent == "a" {
				mine = append(mine, info.Stream)
			}
		}
		if wantNew && (len(mine) != 1 || mine[0] != "s4") || !wantNew && len(mine) != 0 {
			t.Fatalf("streams of a: %v (new stream expected %v)", mine, wantNew)
		}
		latest, err := st.Latest("a")
		if wantNew && (err != nil || latest.Stream != "s4") || !wantNew && !errors.Is(err, chunk.ErrUnknownStream) {
			t.Fatalf("latest of a: %+v, %v", latest, err)
		}
		if _, err := st.Get("a/b", "s3"); err != nil {
			t.Fatalf("agent a/b lost its stream: %v", err)
		}
		for info, err := range st.Ended(time.Now().Add(time.Hour)) {
			if err != nil {
				t.Fatal(err)
			}
			if info.Agent == "a" && info.Stream != "s4" {
				t.Fatalf("the ended index still has %s/%s", info.Agent, info.Stream)
			}
		}
	}
	check(t, env.streams, false)
	env.write(t, "a", "s4", finished...)
	check(t, env.streams, true)

	lg2 := eventlogtest.OpenOn(t, srv, eventlog.Config{})
	pr, err := lg2.NewProjector(chunk.StreamsProjection())
	if err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunProjector(t, pr)
	last, _ := env.lg.LastSeq(ctx, eventlog.Filter{Chunks: true})
	if err := pr.WaitFor(ctx, last); err != nil {
		t.Fatal(err)
	}
	v, _ := lg2.View(chunk.StreamsProjectionName)
	check(t, chunk.NewStreams(v), true)
}
