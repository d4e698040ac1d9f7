package eventlog_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
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
	lg, f, mine := pastPausedConsumer(ctx, t, nil)
	if err := f.WaitPartition(ctx, 0); err != nil {
		t.Fatalf("wait for partition 0 past its paused consumer: %v", err)
	}
	if got := dump(t, lg, "counter")["n/"+mine]; got != "2" {
		t.Errorf("n/%s = %q after the consumer was recreated, want 2 (every event once)", mine, got)
	}
}

// TestStuckConsumerRenewedOnce: several recoveries waiting on one shard
// past its stuck consumer (a new owner's agents of one partition) each
// ask for a new consumer after their own wait; the follower recreates it
// once, and every wait ends. Each ask renewed it again, four times in
// 30 ms in a chaos run, each new consumer cancelled before it could
// deliver.
func TestStuckConsumerRenewedOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	reg := prometheus.NewRegistry()
	_, f, _ := pastPausedConsumer(ctx, t, reg)
	const waiters = 6
	errs := make(chan error, waiters)
	for range waiters {
		go func() { errs <- f.WaitPartition(ctx, 0) }()
	}
	for range waiters {
		if err := <-errs; err != nil {
			t.Fatalf("wait for partition 0 past its paused consumer: %v", err)
		}
	}
	if got := counterValue(t, reg, "forever_eventlog_view_consumer_renewals_total"); got != 1 {
		t.Errorf("consumer renewed %v times for %d waits; want once", got, waiters)
	}
}

// pastPausedConsumer runs a follower of partition 0 of a 2-shard log
// (registering its metrics in reg, if not nil) past one event of mine, an
// agent of partition 0, then pauses the shard's consumers and appends a
// second event of mine, which they do not deliver.
func pastPausedConsumer(ctx context.Context, t *testing.T, reg *prometheus.Registry) (lg *eventlog.Log, f *eventlog.Follower, mine string) {
	t.Helper()
	cfg := eventlog.Config{Shards: 2, Partitions: 4, OwnedViews: true}
	if reg != nil {
		cfg.Registerer = reg
	}
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg = eventlogtest.OpenOn(t, s, cfg)
	for i := 0; mine == ""; i++ {
		if id := "agent" + strconv.Itoa(i); eventlog.PartitionOf(id, 4) == 0 {
			mine = id
		}
	}
	if err := lg.FollowPartition(0); err != nil {
		t.Fatal(err)
	}
	f = newFollower(t, lg, counter(1))
	eventlogtest.RunFollower(t, f)
	if _, err := lg.Append(ctx, eventlog.Event{Agent: mine, Type: "tick", Data: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	if err := f.WaitPartition(ctx, 0); err != nil {
		t.Fatal(err)
	}
	pauseConsumers(ctx, t, s, mine)
	if _, err := lg.Append(ctx, eventlog.Event{Agent: mine, Type: "tick", Data: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	return lg, f, mine
}

// pauseConsumers pauses every consumer of agent's events stream for a
// minute: the server keeps them, and their heartbeats, but delivers
// nothing.
func pauseConsumers(ctx context.Context, t *testing.T, s *server.Server, agent string) {
	t.Helper()
	js, err := jetstream.New(eventlogtest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	ls, err := eventlog.ReadStreams(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	stream := ls.EventsOf(agent)
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	for name := range st.ConsumerNames(ctx).Name() {
		if _, err := js.PauseConsumer(ctx, stream, name, time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
}

// counterValue is the value of the counter name in reg (0 if absent).
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	return 0
}

// TestViewsConsumerHeartbeat: a views follow asks its consumer's server
// for a heartbeat every second, and so does a client's Follow
// (followHeartbeat), so nats.go recreates a consumer whose
// server died after two of them missed, not ten seconds (its default 5 s
// heartbeat). Read off the pull requests themselves.
func TestViewsConsumerHeartbeat(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	pulls, err := eventlogtest.Connect(t, s).SubscribeSync("$JS.API.CONSUMER.MSG.NEXT.>")
	if err != nil {
		t.Fatal(err)
	}
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{})
	askedFor := func(what string, want time.Duration) {
		t.Helper()
		for {
			m, err := pulls.NextMsgWithContext(ctx)
			if err != nil {
				t.Fatalf("no %s pull asked for a %v heartbeat: %v", what, want, err)
			}
			var req struct {
				Heartbeat time.Duration `json:"idle_heartbeat"`
			}
			if err := json.Unmarshal(m.Data, &req); err != nil {
				t.Fatalf("pull request %q: %v", m.Data, err)
			}
			if req.Heartbeat == want {
				return
			}
			t.Logf("pull of %s with a heartbeat of %v", m.Subject, req.Heartbeat)
		}
	}
	eventlogtest.RunFollower(t, newFollower(t, lg, counter(1)))
	askedFor("views", eventlog.ViewsHeartbeat)
	go func() {
		for range lg.Follow(ctx, eventlog.Filter{Agent: "a"}, 0) {
		}
	}()
	askedFor("client follow", eventlog.FollowHeartbeat)
}
