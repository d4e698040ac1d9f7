package agentd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/backoff"
	"github.com/forever-agents/forever/ownership"
	"github.com/nats-io/nats.go"
)

// PartitionFunc serves one partition this node acquired: it runs for as long
// as ctx lives (the lease is held), and must stop everything it started for
// the partition before it returns, since the lease is handed over then.
type PartitionFunc func(ctx context.Context, l ownership.Lease)

// IncomingFunc gets this node ready for partition p, assigned to it while
// another node holds it: it runs until ctx ends (this node is neither
// assigned p nor holds it any more), and calls warm once this node could
// serve p at once. The holder hands p over then, or after a bound
// (ownership.Config.Prepare).
type IncomingFunc func(ctx context.Context, p int, warm func())

// FencedFunc is told that an append of agent conflicted: another node wrote
// the agent, so this node must stop it at once.
type FencedFunc func(agent string, err error)

// partitions is the daemon's side of ownership: the lease manager, the
// handlers that serve acquired partitions, and the token source the event
// log fences appends with.
type partitions struct {
	mgr *ownership.Manager
	// ready publishes mgr to readiness, which Daemon.Ready may run while
	// Run is still opening it.
	ready  atomic.Pointer[ownership.Manager]
	stop   context.CancelFunc
	done   chan error    // Run's result, put back after reading
	sealed chan struct{} // closed once the start hooks registered their handlers

	mu struct {
		sync.Mutex
		serve    []PartitionFunc
		incoming []IncomingFunc
		fenced   []FencedFunc
	}
}

// OnPartition adds fn to the functions called, each in its own goroutine,
// for every partition this node acquires. Call it before Run or from a
// StartFunc.
func (d *Daemon) OnPartition(fn PartitionFunc) {
	d.parts.mu.Lock()
	defer d.parts.mu.Unlock()
	d.parts.mu.serve = append(d.parts.mu.serve, fn)
}

// OnIncoming adds fn to the functions called, each in its own goroutine,
// for every partition coming to this node from another (a warm handoff):
// p is warm once every one of them called warm. Call it before Run or
// from a StartFunc.
func (d *Daemon) OnIncoming(fn IncomingFunc) {
	d.parts.mu.Lock()
	defer d.parts.mu.Unlock()
	d.parts.mu.incoming = append(d.parts.mu.incoming, fn)
}

// OnFenced adds fn to the functions told when an append conflicted because
// another node took an agent over.
func (d *Daemon) OnFenced(fn FencedFunc) {
	d.parts.mu.Lock()
	defer d.parts.mu.Unlock()
	d.parts.mu.fenced = append(d.parts.mu.fenced, fn)
}

// run starts the lease manager. Partitions it acquires before seal wait
// for it, so every handler a start hook registers sees every partition.
func (p *partitions) run(ctx context.Context) {
	ctx, p.stop = context.WithCancel(context.WithoutCancel(ctx))
	p.done = make(chan error, 1)
	go func() { p.done <- p.mgr.Run(ctx) }()
}

// seal lets acquired partitions be served.
func (p *partitions) seal() { close(p.sealed) }

// handoff stops the manager, which hands every partition off, and waits up
// to timeout for it.
func (p *partitions) handoff(timeout time.Duration) error {
	if p.stop == nil {
		return nil
	}
	p.stop()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-t.C:
		return fmt.Errorf("agentd: partition handoff did not finish within %s", timeout)
	}
}

// serve runs every PartitionFunc for l and returns once all returned.
func (p *partitions) serve(ctx context.Context, l ownership.Lease) {
	select {
	case <-p.sealed:
	case <-ctx.Done():
		return
	}
	p.mu.Lock()
	fns := p.mu.serve
	p.mu.Unlock()
	if len(fns) == 0 {
		<-ctx.Done()
		return
	}
	var wg sync.WaitGroup
	for _, fn := range fns {
		wg.Go(func() { fn(ctx, l) })
	}
	wg.Wait()
}

// prepare runs every IncomingFunc for partition p and returns once all
// returned; warm is called once every one called its own.
func (p *partitions) prepare(ctx context.Context, part int, warm func()) {
	select {
	case <-p.sealed:
	case <-ctx.Done():
		return
	}
	p.mu.Lock()
	fns := p.mu.incoming
	p.mu.Unlock()
	if len(fns) == 0 {
		warm()
		<-ctx.Done()
		return
	}
	var left atomic.Int32
	left.Store(int32(len(fns)))
	var wg sync.WaitGroup
	for _, fn := range fns {
		var once sync.Once
		wg.Go(func() {
			fn(ctx, part, func() {
				once.Do(func() {
					if left.Add(-1) == 0 {
						warm()
					}
				})
			})
		})
	}
	wg.Wait()
}

// onFenced tells the FencedFuncs, then has the manager read the agent's
// lease again: a conflict may mean this node lost it.
func (p *partitions) onFenced(agent string, err error) {
	p.mu.Lock()
	fns := p.mu.fenced
	p.mu.Unlock()
	for _, fn := range fns {
		fn(agent, err)
	}
	if p.mgr != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.mgr.Check(ctx, ownership.PartitionOf(agent, p.mgr.Partitions()))
	}
}

// Token implements eventlog.Owner: the lease of the agent's partition, while
// this node holds it.
func (p *partitions) Token(agent string) (eventlog.Token, bool) {
	l, ctx, ok := p.mgr.Owned(ownership.PartitionOf(agent, p.mgr.Partitions()))
	if !ok || ctx.Err() != nil {
		return eventlog.Token{}, false
	}
	return eventlog.Token{Node: l.Node, Epoch: l.Epoch}, true
}

var _ eventlog.Owner = (*partitions)(nil)

// leaving reports whether server's node is stopping (its key announces
// it): the log places a views consumer JetStream put there again.
func (p *partitions) leaving(server string) bool {
	return p.mgr != nil && p.mgr.Leaving(server)
}

// open creates the lease manager on nc. A cluster that has no JetStream
// quorum yet (its nodes are still starting) is waited for, up to
// serverStartTimeout, with a log line per attempt.
func (p *partitions) open(ctx context.Context, cfg *Config, nc *nats.Conn, d *Daemon) error {
	ocfg := ownership.Config{
		Conn:       nc,
		Node:       cfg.ServerName,
		Partitions: cfg.Partitions,
		// Shards: creationShards, at each attempt. A cluster created
		// with shards starts at their format.
		ShardsFormat: FormatShards,
		// No --shards (0): the count the cluster stored, so a node
		// restarted with its usual flags after agentd shards move (or
		// a pod of the chart) joins the layout; Shards is then only a
		// new cluster's count (creationShards).
		AdoptShards: cfg.Shards == 0,
		TTL:         cfg.LeaseTTL,
		Replicas:    cfg.Replicas,
		Format:      cfg.recordFormat(),
		KeepFormat:  FormatKeptPartitions,
		// A rolling upgrade raises the format once its last node runs
		// this release, with no step of the operator's.
		AutoActivate: true,
		Serve:        p.serve,
		Prepare:      p.prepare,
		// A stop hands off warm for at most half its step, so the drain
		// and the cold rest fit the handoff's ShutdownTimeout + LeaseTTL.
		DrainWait:  min(ownership.DefaultDrainWait, max(cfg.ShutdownTimeout/2, time.Millisecond)),
		Logger:     cfg.Logger,
		Registerer: cfg.Registerer,
	}
	return RetryQuorum(ctx, d.logger, "partition leases", cfg.Replicas, func(ctx context.Context) error {
		var err error
		if ocfg.Shards, err = cfg.creationShards(ctx, nc); err != nil {
			return err
		}
		mgr, err := ownership.New(ctx, ocfg)
		if errors.Is(err, ownership.ErrPartitionMismatch) {
			return permanent{newFlagError(ErrConfig, err, "partitions", err.Error())}
		}
		if errors.Is(err, ownership.ErrShardsMismatch) {
			return permanent{newFlagError(ErrConfig, err, "shards", err.Error())}
		}
		if errors.Is(err, ownership.ErrFormatTooNew) {
			return permanent{err}
		}
		p.mgr = mgr
		if mgr != nil {
			p.ready.Store(mgr)
		}
		return err
	})
}

// quorumAttempt bounds the first attempts of retryQuorum. A JetStream API
// request sent before the cluster elected its meta leader is not
// answered: short attempts notice the leader sooner, which is what a node
// waiting for its peers to start wants. From the fourth attempt on, each
// gets twice the time of the one before, up to maxQuorumAttempt: on a
// loaded machine (a load average of 4 per core), creating a fresh
// cluster's R3 streams and reading them back can take longer than 3 s,
// and attempts that never grew would each be cut short and start over
// until the start timeout.
const (
	quorumAttempt    = 3 * time.Second
	maxQuorumAttempt = 12 * time.Second
)

// attemptBudget is the time retryQuorum gives attempt n (from 0): 3 s for
// the first three, then 6 s, then 12 s.
func attemptBudget(n int) time.Duration {
	d := quorumAttempt
	for i := 3; i <= n; i++ {
		if d *= 2; d >= maxQuorumAttempt {
			return maxQuorumAttempt
		}
	}
	return d
}

// permanent marks an error retryQuorum must not retry.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// RetryQuorum runs fn until it succeeds: streams and buckets of a cluster
// whose JetStream has no quorum yet (its nodes are still starting) cannot
// be created. Each attempt gets attemptBudget (3 s, growing to 12 s);
// fn is retried with backoff, logged, for up to serverStartTimeout, then
// its error is returned.
func RetryQuorum(ctx context.Context, logger *slog.Logger, what string, replicas int, fn func(context.Context) error) error {
	deadline := time.Now().Add(serverStartTimeout)
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, attemptBudget(attempt))
		err := fn(actx)
		cancel()
		var perm permanent
		switch {
		case err == nil:
			return nil
		case errors.As(err, &perm):
			return perm.error
		case ctx.Err() != nil:
			return ctx.Err()
		case time.Now().After(deadline):
			return fmt.Errorf("%w: %s: no JetStream quorum for %d replicas after %s: %w",
				ErrNATS, what, replicas, serverStartTimeout, err)
		}
		msg := "waiting for the JetStream cluster (are the other nodes up?)"
		if errors.Is(err, nats.ErrNoResponders) {
			// Nothing serves the JetStream API in this account: JetStream
			// is off on the server, or the server could not reserve the
			// account's limits (its log says so).
			msg = "waiting for JetStream: no JetStream API answers in this account (is JetStream enabled on the server, and could it reserve the account's limits?)"
		}
		logger.Warn(msg, "for", what, "replicas", replicas, "attempt", attempt+1, "err", err)
		select {
		case <-time.After(backoff.Exp(250*time.Millisecond, 5*time.Second, attempt)):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
