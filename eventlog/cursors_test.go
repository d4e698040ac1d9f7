package eventlog_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestShardCursors: a sharded log's follower has no one cursor (Cursor is
// 0, which no WaitFor waits on); Cursors gives each shard's, naming its
// shard, at the last event of that shard once the views caught up.
func TestShardCursors(t *testing.T) {
	ctx := t.Context()
	lg, _ := eventlogtest.Open(t, eventlog.Config{Shards: 4, Partitions: 8})
	last := map[int]eventlog.Seq{}
	for _, a := range agentsOverShards(t, 16, 8, 4) {
		seq, err := lg.Append(ctx, eventlog.Event{Agent: a, Type: "tick", Data: json.RawMessage(`1`)})
		if err != nil {
			t.Fatal(err)
		}
		k, _ := eventlog.ShardOf(seq)
		last[k] = max(last[k], seq)
	}
	pr, err := lg.NewProjector(counter(1))
	if err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunProjector(t, pr)
	if err := pr.WaitFor(ctx, eventlog.SeqEnds); err != nil {
		t.Fatal(err)
	}
	if got := pr.Cursor(); got != 0 {
		t.Errorf("Cursor of a sharded log = %d, want 0", got)
	}
	cursors := pr.Cursors()
	if len(cursors) != 4 {
		t.Fatalf("Cursors = %v, want 4", cursors)
	}
	for k, c := range cursors {
		if ks, _ := eventlog.ShardOf(c); ks != k || c != last[k] {
			t.Errorf("shard %d's cursor %d (of shard %d), want %d", k, c, ks, last[k])
		}
	}
}

// TestReadStreams: a client without a Log learns the streams of either
// layout, and where an agent's events are.
func TestReadStreams(t *testing.T) {
	for _, shards := range []int{0, 4} {
		lg, s := eventlogtest.Open(t, eventlog.Config{Shards: shards, Partitions: 8})
		js, err := jetstream.New(eventlogtest.Connect(t, s))
		if err != nil {
			t.Fatal(err)
		}
		ls, err := eventlog.ReadStreams(t.Context(), js)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ls.Events, lg.EventsStreams()) || !slices.Equal(ls.Chunks, lg.ChunksStreams()) || ls.Shards != shards {
			t.Fatalf("shards %d: read %+v", shards, ls)
		}
		seq, err := lg.Append(t.Context(), eventlog.Event{Agent: "a7", Type: "tick", Data: json.RawMessage(`1`)})
		if err != nil {
			t.Fatal(err)
		}
		st, err := js.Stream(t.Context(), ls.EventsOf("a7"))
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.GetLastMsgForSubject(t.Context(), ls.EventsSubject("forever", "a7"))
		if _, raw := eventlog.ShardOf(seq); err != nil || m.Sequence != raw {
			t.Fatalf("shards %d: a7's last event in %s: %v, %v; want sequence %d", shards, ls.EventsOf("a7"), m, err, raw)
		}
	}
}
