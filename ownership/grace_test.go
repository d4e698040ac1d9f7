package ownership

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// leaseOwner is the eventlog.Owner agentd builds from a Manager: the lease
// of the agent's partition, while Owned says this node holds it.
type leaseOwner struct{ m *Manager }

func (o leaseOwner) Token(agent string) (eventlog.Token, bool) {
	l, ctx, ok := o.m.Owned(PartitionOf(agent, o.m.Partitions()))
	if !ok || ctx.Err() != nil {
		return eventlog.Token{}, false
	}
	return eventlog.Token{Node: l.Node, Epoch: l.Epoch}, true
}

// graceEnv is a 3-server cluster whose lease bucket (R3) has lost its
// quorum: the two servers other than on, which holds the log's events
// stream (R1) and the node a's connection, are shut down. Nobody can write
// the bucket, and it has no leader, for as long as the test wants: an
// election that never ends, without a timing.
type graceEnv struct {
	a       *Manager
	lg      *eventlog.Log
	agent   string
	srvs    []*server.Server
	on      int
	restart []func()
	// stopped, set, blocks a's Run before its next renewal attempt, as a
	// SIGSTOP of the process would; resume ends it.
	stopped atomic.Bool
	resume  chan struct{}
	once    sync.Once
}

func newGraceEnv(t *testing.T) *graceEnv {
	t.Helper()
	ctx := t.Context()
	env := &graceEnv{srvs: eventlogtest.RunCluster(t, 3), agent: "graced", resume: make(chan struct{})}
	// The log's streams, R1: the events stream lands on one server, where
	// the node runs and which stays up.
	openLog(t, env.srvs[0], eventlog.Config{})
	js, err := jetstream.New(eventlogtest.Connect(t, env.srvs[0]))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, eventlog.DefaultEventsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range env.srvs {
		if s.Name() == info.Cluster.Leader {
			env.on = i
		}
	}

	cfg := Config{Node: "a", Partitions: 1, TTL: 6 * time.Second, Replicas: 3,
		// Far longer than the test needs: the grace is not what ends the
		// lease here. The TTL of 6 s gives the pause detection
		// (graceFresh, 0.75 s) room on a loaded machine.
		ElectionGrace: time.Minute}
	env.a = newManager(t, env.srvs[env.on], cfg)
	env.a.beforeRenew = func() {
		if env.stopped.Load() {
			<-env.resume
		}
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- env.a.Run(rctx) }()
	t.Cleanup(func() {
		env.unstop()
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	<-env.a.Ready()
	env.lg = openLog(t, env.srvs[env.on], eventlog.Config{Owner: leaseOwner{env.a}})
	if _, err := appendNote(ctx, env.lg, env.agent); err != nil {
		t.Fatalf("append before the bucket lost its leader: %v", err)
	}
	return env
}

// openLog opens a Log on s, retrying while the cluster that just formed
// cannot create its streams yet (a loaded machine).
func openLog(t *testing.T, s *server.Server, cfg eventlog.Config) *eventlog.Log {
	t.Helper()
	cfg.Conn = eventlogtest.Connect(t, s)
	cfg.Dir = t.TempDir()
	var lg *eventlog.Log
	eventually(t, "the log opened", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		var err error
		lg, err = eventlog.Open(ctx, cfg)
		return err == nil
	})
	t.Cleanup(func() { lg.Close() })
	return lg
}

func (env *graceEnv) unstop() { env.once.Do(func() { close(env.resume) }) }

// loseQuorum shuts down the two servers other than on.
func (env *graceEnv) loseQuorum(t *testing.T) {
	t.Helper()
	for i := range env.srvs {
		if i != env.on {
			env.restart = append(env.restart, eventlogtest.StopServer(t, env.srvs, i))
		}
	}
	// The bucket takes no write now (not a timing: a state this test
	// made; the write's own timeout only keeps it from hanging).
	pctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if _, err := env.a.kv.Put(pctx, prefixNode+"probe", []byte(`{}`)); err == nil {
		t.Fatal("the lease bucket took a write with two of its three servers down")
	}
}

func appendNote(ctx context.Context, lg *eventlog.Log, agent string) (eventlog.Seq, error) {
	return lg.Append(ctx, eventlog.Event{Agent: agent, Type: "note.added", Data: []byte(`{}`)})
}

// pastDeadline waits until a's lease of partition 0 is past the deadline
// its last successful renewal gave it, with its renewals failing; it
// returns the lease's context, or fails the test if the lease was dropped.
func (env *graceEnv) pastDeadline(t *testing.T) context.Context {
	t.Helper()
	m := env.a
	var h *held
	eventually(t, "the lease past its deadline, its renewals failing", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		h = m.mu.held[0]
		return h == nil || (h.failing && time.Now().After(h.until))
	})
	if h == nil {
		t.Fatal("the lease was dropped while the bucket had no leader")
	}
	return h.ctx
}

// TestLeaseOutlivesBucketElection: while the lease bucket has no leader
// (it lost its quorum here; in production its leader died and nats-server
// elects another, 4 to 9 s), nobody can take a lease, so a holder keeps
// serving its partitions past their deadline, retrying its renewals, and
// the agent's appends go on. Once the bucket is back, the same lease is
// renewed: no new epoch, the partition never stopped.
func TestLeaseOutlivesBucketElection(t *testing.T) {
	ctx := t.Context()
	env := newGraceEnv(t)
	before, pctx, _ := env.a.Owned(0)
	env.loseQuorum(t)
	served := env.pastDeadline(t)
	if served != pctx {
		t.Fatal("the partition was served again under another context")
	}
	if _, err := appendNote(ctx, env.lg, env.agent); err != nil {
		t.Fatalf("append past the lease's deadline while the bucket has no leader: %v", err)
	}
	if err := context.Cause(pctx); err != nil {
		t.Fatalf("the partition stopped: %v", err)
	}

	for _, restart := range env.restart {
		restart()
	}
	eventually(t, "the lease renewed once the bucket is back", func() bool {
		m := env.a
		m.mu.Lock()
		defer m.mu.Unlock()
		h := m.mu.held[0]
		return h == nil || (!h.failing && time.Now().Before(h.until))
	})
	after, actx, ok := env.a.Owned(0)
	if !ok || after != before || actx != pctx {
		t.Fatalf("after the bucket returned: lease %+v (held %v), want %+v served all along", after, ok, before)
	}
	if err := context.Cause(pctx); err != nil {
		t.Fatalf("the partition stopped: %v", err)
	}
	if _, err := appendNote(ctx, env.lg, env.agent); err != nil {
		t.Fatalf("append after the bucket returned: %v", err)
	}
}

// TestStoppedHolderRefusedOnGrace: the election grace holds only while the
// holder keeps retrying its renewals. A holder stopped meanwhile (SIGSTOP,
// a long pause: here its Run blocked before its next attempt) finds its
// lease expired, not graced: Owned refuses it, its partition's context
// ends with ErrLeaseExpired, and its appends are refused by the log's
// fence, though the bucket still has no leader.
func TestStoppedHolderRefusedOnGrace(t *testing.T) {
	ctx := t.Context()
	env := newGraceEnv(t)
	env.loseQuorum(t)
	pctx := env.pastDeadline(t)
	if _, err := appendNote(ctx, env.lg, env.agent); err != nil {
		t.Fatalf("append on the grace: %v", err)
	}
	env.stopped.Store(true)
	eventually(t, "the stopped holder's lease dropped", func() bool {
		_, _, ok := env.a.Owned(0)
		return !ok
	})
	if err := context.Cause(pctx); !errors.Is(err, ErrLeaseExpired) {
		t.Errorf("the partition's context ended with %v, want ErrLeaseExpired", err)
	}
	if _, err := appendNote(ctx, env.lg, env.agent); !errors.Is(err, eventlog.ErrNotOwner) {
		t.Errorf("append by the stopped holder: %v, want ErrNotOwner", err)
	}
}

// TestRenewalAnswerLost: a renewal that landed but whose answer was lost
// (the bucket's leader died between storing it and answering) leaves the
// holder expecting an older revision; its next renewal conflicts. The key
// still holds this very lease, so the holder takes its revision and keeps
// the lease, instead of losing a partition nobody else took.
func TestRenewalAnswerLost(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	a := startNode(t, s, Config{Node: "a", Partitions: 1, TTL: 2 * time.Second})
	before, pctx, ok := a.m.Owned(0)
	if !ok {
		t.Fatal("a holds no lease")
	}
	a.m.mu.Lock()
	h := a.m.mu.held[0]
	stored := h.rev
	h.rev-- // the revision before the renewal whose answer was lost
	a.m.mu.Unlock()
	eventually(t, "a renewal past the lost answer", func() bool {
		a.m.mu.Lock()
		defer a.m.mu.Unlock()
		return a.m.mu.held[0] != h || h.rev > stored
	})
	after, actx, ok := a.m.Owned(0)
	if !ok || after != before || actx != pctx {
		t.Fatalf("after a conflicting renewal of a lease the key still holds: %+v (held %v), want %+v kept", after, ok, before)
	}
}
