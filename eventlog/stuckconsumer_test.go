package eventlog_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/nats-io/nats.go/jetstream"
)

// TestOwnedViewsWaitPartitionPastAStuckConsumer: a wait for a partition's
// events (a new owner's recovery) is not held by a shard follower's
// consumer that delivers nothing while events are stored: after
// renewAfter without progress the follower recreates it from its last
// applied event. In the failover bench such consumers (on the killed
// server, or created while its streams elected) held recoveries 10 s,
// until nats.go noticed two missed heartbeats. Here the server pauses the
// consumer and goes on sending heartbeats, so the library never would:
// without the renewal the wait lasts until the pause ends, a minute.
func TestOwnedViewsWaitPartitionPastAStuckConsumer(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{Shards: 2, Partitions: 4, OwnedViews: true})
	var mine string
	for i := 0; mine == ""; i++ {
		if id := "agent" + strconv.Itoa(i); eventlog.PartitionOf(id, 4) == 0 {
			mine = id
		}
	}
	if err := lg.FollowPartition(0); err != nil {
		t.Fatal(err)
	}
	f := newFollower(t, lg, counter(1))
	eventlogtest.RunFollower(t, f)
	if _, err := lg.Append(ctx, eventlog.Event{Agent: mine, Type: "tick", Data: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	if err := f.WaitPartition(ctx, 0); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(eventlogtest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	ls, err := eventlog.ReadStreams(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	stream := ls.EventsOf(mine)
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	for name := range st.ConsumerNames(ctx).Name() {
		if _, err := js.PauseConsumer(ctx, stream, name, time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := lg.Append(ctx, eventlog.Event{Agent: mine, Type: "tick", Data: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	if err := f.WaitPartition(ctx, 0); err != nil {
		t.Fatalf("wait for partition 0 past its paused consumer: %v", err)
	}
	if got := dump(t, lg, "counter")["n/"+mine]; got != "2" {
		t.Errorf("n/%s = %q after the consumer was recreated, want 2 (every event once)", mine, got)
	}
}
