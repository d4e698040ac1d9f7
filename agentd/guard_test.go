package agentd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/waitfor"
)

// TestGuardClusteredPurgeAdvisory: a clustered server's purge advisory
// names no request, so the guard cannot see its filter there; it sees the
// purge request itself, published to the API subject it subscribes to. A
// filtered purge that took more messages than the last look saw
// (compaction of a busy agent) is not a loss, even when that agent is the
// only one of its stream (a shard holding one agent: every message the
// last look saw is gone, the chaos run of stop 46 saw it taken for a
// whole purge). A whole purge is a loss.
func TestGuardClusteredPurgeAdvisory(t *testing.T) {
	nc, js := guardServer(t)
	ctx := t.Context()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVS", Subjects: []string{"evt.>"}})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(subj string, n int) {
		for range n {
			if _, err := js.Publish(ctx, subj, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	// advise feeds the guard the advisory a clustered server sends for a
	// purge that removed n messages: no request.
	advise := func(g *guard, n uint64) {
		resp, _ := json.Marshal(map[string]any{"success": true, "purged": n})
		data, _ := json.Marshal(map[string]any{"subject": purgePrefix + "EVS", "response": string(resp)})
		g.audit(&nats.Msg{Data: data})
	}
	for _, tc := range []struct {
		name  string
		only  bool // the stream holds only evt.busy
		purge func() uint64
		loss  bool
	}{
		{"filtered-only-subject", true, func() uint64 {
			// Compaction of the stream's only agent: its snapshot is
			// written after the look, then every event before it purged.
			publish("evt.busy", 50)
			info, err := st.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Purge(ctx, jetstream.WithPurgeSubject("evt.busy"), jetstream.WithPurgeSequence(info.State.LastSeq)); err != nil {
				t.Fatal(err)
			}
			return 56
		}, false},
		{"filtered", false, func() uint64 {
			// The busy agent wrote 50 more since the look; compaction
			// purges all but its last.
			publish("evt.busy", 50)
			if err := st.Purge(ctx, jetstream.WithPurgeSubject("evt.busy"), jetstream.WithPurgeKeep(1)); err != nil {
				t.Fatal(err)
			}
			return 54
		}, false},
		{"whole", false, func() uint64 {
			if err := st.Purge(ctx); err != nil {
				t.Fatal(err)
			}
			return 7
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := st.Purge(ctx); err != nil {
				t.Fatal(err)
			}
			want := "stream EVS was purged (7 events of 3 agents lost) and was healed"
			if tc.only {
				publish("evt.busy", 7)
				want = "stream EVS was purged (7 events of 1 agents lost) and was healed"
			} else {
				publish("evt.a", 3)
				publish("evt.b", 3)
				publish("evt.busy", 1)
			}
			g, err := newGuard(slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			var healed []Loss
			g.add(Guarded{Stream: "EVS", What: "stream EVS", Unit: "events", Subjects: "agents",
				Heal: func(_ context.Context, l Loss) error { healed = append(healed, l); return nil }})
			state := g.mu.states[0]
			// The guard's subscription to purge requests, read by hand.
			asked, err := nc.SubscribeSync(purgePrefix + "*")
			if err != nil {
				t.Fatal(err)
			}
			defer asked.Unsubscribe()
			g.lookAt(ctx, js, state) // the look before: 7 messages
			n := tc.purge()
			m, err := asked.NextMsg(10 * time.Second)
			if err != nil {
				t.Fatalf("the purge request was not seen: %v", err)
			}
			g.purgeRequest(m)
			advise(g, n)
			g.lookAt(ctx, js, state)
			if got := len(healed) == 1 && healed[0].Kind == LossPurged; got != tc.loss || len(healed) > 1 {
				t.Fatalf("losses healed: %+v; want a purge: %v", healed, tc.loss)
			}
			// A healed loss stays listed for /readyz's degraded.
			shown := strings.Join(g.healedLosses(), "; ")
			if strings.Contains(shown, want) != tc.loss {
				t.Errorf("healed losses shown: %q; want %q: %v", shown, want, tc.loss)
			}
		})
	}
}

// TestGuardPurgeOnACluster: on a real 3-node cluster, whose purge
// advisories carry no request, the compaction of a stream's only agent
// (every message the guard last saw purged, its snapshot kept) is no
// loss, and a whole purge is one. The guard's two subscriptions (the
// purge requests and the API audit) are read by hand, in the order the
// server sends them: a request comes a Raft round before its advisory.
func TestGuardPurgeOnACluster(t *testing.T) {
	srvs := eventlogtest.RunCluster(t, 3)
	nc := eventlogtest.Connect(t, srvs[0])
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVS", Subjects: []string{"evt.>"}, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(n int) {
		for range n {
			if _, err := js.Publish(ctx, "evt.only", []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	asked, err := nc.SubscribeSync(purgePrefix + "*")
	if err != nil {
		t.Fatal(err)
	}
	audits, err := nc.SubscribeSync(jsAPIAudit)
	if err != nil {
		t.Fatal(err)
	}
	g, err := newGuard(slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var healed []Loss
	g.add(Guarded{Stream: "EVS", What: "stream EVS", Unit: "events", Subjects: "agents",
		Heal: func(_ context.Context, l Loss) error { healed = append(healed, l); return nil }})
	state := g.mu.states[0]
	// feed hands the guard the purge's request and its advisory.
	feed := func() {
		t.Helper()
		m, err := asked.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("the purge request was not seen: %v", err)
		}
		g.purgeRequest(m)
		for {
			m, err := audits.NextMsg(10 * time.Second)
			if err != nil {
				t.Fatalf("the purge's advisory was not seen: %v", err)
			}
			if bytes.Contains(m.Data, []byte(purgePrefix+"EVS")) {
				g.audit(m)
				return
			}
		}
	}
	publish(7)
	g.lookAt(ctx, js, state) // the look before: 7 messages of one agent
	publish(50)
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject("evt.only"), jetstream.WithPurgeSequence(info.State.LastSeq)); err != nil {
		t.Fatal(err)
	}
	feed()
	g.lookAt(ctx, js, state)
	if len(healed) > 0 {
		t.Fatalf("a compaction of the stream's only agent was taken for a loss: %+v", healed)
	}
	publish(4)
	if err := st.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	feed()
	g.lookAt(ctx, js, state)
	if len(healed) != 1 || healed[0].Kind != LossPurged || healed[0].Msgs != 5 {
		t.Fatalf("losses healed: %+v; want one purge of 5 events", healed)
	}
}

// TestGuardRestartsStalledViews: views that followed their stream and
// then stay behind it, their cursor still, for restartAfter are made to
// start over, once per restartAfter. Views that move, are caught up, or
// are still replaying since their start (never caught up) are left alone.
func TestGuardRestartsStalledViews(t *testing.T) {
	g, err := newGuard(slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	g.restartAfter = time.Minute
	now := time.Now()
	g.now = func() time.Time { return now }
	var restarted []string
	g.restartViews = func(stream string) bool { restarted = append(restarted, stream); return true }
	var stuck, moving, done, replaying eventlog.Seq = 10, 5, 10, 3
	g.watchView("stuck", "A", func() eventlog.Seq { return stuck })
	g.watchView("moving", "B", func() eventlog.Seq { moving++; return moving })
	g.watchView("done", "C", func() eventlog.Seq { return done })
	g.watchView("replaying", "D", func() eventlog.Seq { return replaying })
	lasts := map[string]uint64{"A": 10, "B": 1000, "C": 10, "D": 1000}
	g.lookAtViews(lasts) // A caught up
	lasts["A"] = 20      // and then no longer follows
	g.lookAtViews(lasts)
	if len(restarted) != 0 {
		t.Fatalf("restarted %v at once", restarted)
	}
	now = now.Add(61 * time.Second)
	g.lookAtViews(lasts)
	g.lookAtViews(lasts) // within restartAfter of the restart: not again
	if want := []string{"A"}; !slices.Equal(restarted, want) {
		t.Fatalf("restarted %v, want %v", restarted, want)
	}
	now = now.Add(61 * time.Second)
	g.lookAtViews(lasts)
	if len(restarted) != 2 {
		t.Errorf("restarted %v; a view still stalled a restartAfter later is restarted again", restarted)
	}
	stuck = 20 // caught up
	now = now.Add(61 * time.Second)
	g.lookAtViews(lasts)
	if len(restarted) != 2 {
		t.Errorf("restarted %v after the views caught up", restarted)
	}
}

// TestGuardReadsInfoWhenDue: a stream's info, a request every server of a
// cluster decodes, is read at the first look, then only once GuardRefresh
// went by or an advisory named the stream, not at every look.
func TestGuardReadsInfoWhenDue(t *testing.T) {
	nc, js := guardServer(t)
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVS", Subjects: []string{"evt.>"}}); err != nil {
		t.Fatal(err)
	}
	// The requests the guard sends, as a NATS tool sees them.
	infos, err := nc.SubscribeSync("$JS.API.STREAM.INFO.EVS")
	if err != nil {
		t.Fatal(err)
	}
	count := func() int {
		t.Helper()
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		n, _, err := infos.Pending()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	g, err := newGuard(slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	g.now = func() time.Time { return now }
	g.add(Guarded{Stream: "EVS", What: "stream EVS", Unit: "events", Subjects: "agents"})
	for _, step := range []struct {
		what   string
		before func()
		looks  int
		want   int
	}{
		{"first looks", func() {}, 3, 1},
		{"looks within GuardRefresh", func() { now = now.Add(GuardRefresh - time.Second) }, 3, 1},
		{"an advisory naming it", func() { g.advise("EVS") }, 3, 2},
		{"an advisory naming another stream", func() { g.advise("OTHER") }, 3, 2},
		{"GuardRefresh after the last read", func() { now = now.Add(GuardRefresh) }, 3, 3},
	} {
		step.before()
		for range step.looks {
			g.look(ctx, js)
		}
		if got := count(); got != step.want {
			t.Fatalf("%s: %d stream info requests in all, want %d", step.what, got, step.want)
		}
	}
}

// TestGuardNoticesADeletionByItsAdvisory: with a clock that never reaches
// GuardRefresh, a stream deleted under the guard is noticed all the same,
// from JetStream's deletion advisory.
func TestGuardNoticesADeletionByItsAdvisory(t *testing.T) {
	nc, js := guardServer(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVS", Subjects: []string{"evt.>"}}); err != nil {
		t.Fatal(err)
	}
	g, err := newGuard(slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	g.now = func() time.Time { return now } // GuardRefresh never goes by
	healed := make(chan Loss, 1)
	g.add(Guarded{Stream: "EVS", What: "stream EVS", Unit: "events", Subjects: "agents",
		Heal: func(ctx context.Context, l Loss) error {
			select {
			case healed <- l:
			default:
			}
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVS", Subjects: []string{"evt.>"}})
			return err
		}})
	done := make(chan error, 1)
	go func() { done <- g.run(ctx, nc) }()
	waitfor.True(t, "the guard's first look", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return !g.mu.states[0].looked.IsZero()
	})
	if err := js.DeleteStream(ctx, "EVS"); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-healed:
		if l.Kind != LossDeleted {
			t.Errorf("loss %+v, want %s", l, LossDeleted)
		}
	case <-time.After(waitfor.Bound):
		t.Fatalf("the deletion was not noticed in %s", waitfor.Bound)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// guardServer runs a JetStream server for a guard test and connects to it.
func guardServer(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	nc := eventlogtest.Connect(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// TestGuardHoldsTheHealOfAStreamDeletedAgain: a stream deleted right
// after its heal is healed after a hold that doubles with each deletion
// within healAgain of the last heal (1 s, then 2 s), not at once, so a
// restore that deletes it to restore in its place can win; one deleted
// once more after healAgain is healed at once again.
func TestGuardHoldsTheHealOfAStreamDeletedAgain(t *testing.T) {
	_, js := guardServer(t)
	ctx := t.Context()
	// create retries the server's "error creating store for stream"
	// (10049): a stream made again right after its deletion can find its
	// old store still being removed. The guard tries a failed heal again
	// at its next look; this test counts heals, so it waits here instead.
	create := func() error {
		for try := 0; ; try++ {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVS", Subjects: []string{"evt.>"}})
			var apiErr *jetstream.APIError
			if err == nil || try == 50 || !errors.As(err, &apiErr) || apiErr.ErrorCode != 10049 {
				return err
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := create(); err != nil {
		t.Fatal(err)
	}
	g, err := newGuard(slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	g.now = func() time.Time { return now }
	heals := 0
	g.add(Guarded{Stream: "EVS", What: "stream EVS", Unit: "events", Subjects: "agents",
		Heal: func(context.Context, Loss) error { heals++; return create() }})
	g.look(ctx, js)
	for _, step := range []struct {
		what   string
		delete bool
		wait   time.Duration
		heals  int
	}{
		{"deleted", true, 0, 1},
		{"deleted again at once", true, 0, 1},
		{"a second later", false, time.Second, 2},
		{"deleted a third time", true, time.Second, 2},
		{"a second after that", false, time.Second, 2},
		{"two seconds after it", false, time.Second, 3},
		{"deleted after healAgain", true, healAgain + time.Second, 4},
	} {
		now = now.Add(step.wait)
		if step.delete {
			if err := js.DeleteStream(ctx, "EVS"); err != nil {
				t.Fatalf("%s: %v", step.what, err)
			}
			g.advise("EVS") // its deletion advisory
		}
		g.look(ctx, js)
		if heals != step.heals {
			t.Fatalf("%s: %d heals, want %d", step.what, heals, step.heals)
		}
	}
}
