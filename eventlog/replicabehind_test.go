package eventlog_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// A partition newly followed catches up through an ordered consumer, which
// JetStream places on any replica of the stream (an R1 consumer goes to a
// random peer), not on its leader: one that lags delivers the events it
// stores, the last with none pending, while the leader holds more. The
// catch-up must not end there and move the partition's cursor to the
// others' (the events between would never be applied: a new owner's views
// without its agents' newest events, their runs rows missing, after a
// failover). Here the consumer of partition 2 delivers its first event
// with none pending and holds the next ones back until that first one was
// applied, as a replica that catches up meanwhile.
func TestOwnedViewsCatchUpFromReplicaBehind(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{Shards: 2, Partitions: 4, OwnedViews: true})
	// Partitions 0 and 2 are both in shard 0.
	var mine, joining string
	for i := 0; mine == "" || joining == ""; i++ {
		id := "agent" + strconv.Itoa(i)
		switch eventlog.PartitionOf(id, 4) {
		case 0:
			mine = id
		case 2:
			joining = id
		}
	}
	tick := func(agent string) eventlog.Seq {
		t.Helper()
		seq, err := lg.Append(ctx, eventlog.Event{Agent: agent, Type: "tick", Data: json.RawMessage(`1`)})
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	first := tick(joining)
	tick(joining)
	tick(joining)
	tick(mine) // partition 0's cursor ends past partition 2's events

	caughtUp := make(chan struct{})
	var once sync.Once
	eventlog.FollowDelivered(lg, func(ctx context.Context, e *eventlog.Event) {
		if eventlog.PartitionOf(e.Agent, 4) != 2 {
			return
		}
		switch {
		case e.Seq == first:
			e.Pending = 0 // all the replica stores of partition 2 yet
		case e.Seq > first:
			select {
			case <-caughtUp:
			case <-ctx.Done():
			}
		}
	})
	p := counter(1)
	inner := p.Apply
	p.Apply = func(b *eventlog.Batch, e eventlog.Event) error {
		if e.Seq == first {
			once.Do(func() { close(caughtUp) })
		}
		return inner(b, e)
	}
	if err := lg.FollowPartition(0); err != nil {
		t.Fatal(err)
	}
	f := newFollower(t, lg, p)
	eventlogtest.RunFollower(t, f)
	if err := f.WaitPartition(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := lg.FollowPartition(2); err != nil {
		t.Fatal(err)
	}
	if err := f.WaitPartition(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if got, want := dump(t, lg, "counter"), foldOf(t, lg, 4, 0, 2); !equalMaps(got, want) {
		t.Fatalf("view after partition 2 caught up from a replica behind:\n got %v\nwant %v", got, want)
	}
}

// A Read that goes on through its consumer (its direct gets, answered by
// any replica, ended before the last event) returns every event up to the
// last one the leader held when it began, even when that consumer, on a
// replica behind, has none pending before it.
func TestReadFromReplicaBehind(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	var first eventlog.Seq
	for i := range 3 {
		seq, err := lg.Append(ctx, eventlog.Event{Agent: "a1", Type: "tick", Data: json.RawMessage(`1`)})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = seq
		}
	}
	eventlog.DirectNone(lg, func() bool { return true })
	eventlog.FollowDelivered(lg, func(_ context.Context, e *eventlog.Event) {
		if e.Seq == first {
			e.Pending = 0 // all the replica stores yet
		}
	})
	evs, err := lg.Read(ctx, eventlog.Filter{Agent: "a1"}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 {
		t.Fatalf("read %d events from a consumer on a replica behind, want the 3 stored", len(evs))
	}
}
