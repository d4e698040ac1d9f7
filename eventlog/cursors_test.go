package eventlog_test

import (
	"encoding/json"
	"testing"

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
