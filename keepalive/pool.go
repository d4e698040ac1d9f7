package keepalive

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultInterval is the heartbeat interval used when PoolConfig.Interval is
// zero.
const DefaultInterval = 10 * time.Second

// Log keys used by the package's loggers.
const (
	logKeySubsystem = "subsystem"
	logKeyAgent     = "agent"
)

// PoolConfig configures NewPool. A zero field means "use the default".
type PoolConfig struct {
	// Interval between heartbeats while an agent holds refs. Default 10s.
	Interval time.Duration
	// Heartbeat is called every Interval, in the agent's heartbeat goroutine,
	// while the agent holds at least one ref, first one Interval after the
	// first Acquire. In cluster mode it renews the
	// ownership lease and returns a *LeaseLostError when the lease is gone.
	// Its ctx is cancelled when the last ref is released, and when the call
	// has run for HeartbeatTimeout; it must return then. Nil means
	// heartbeats do nothing (the goroutine still runs, so the lifecycle is
	// the same).
	Heartbeat func(ctx context.Context, agent string) error
	// HeartbeatTimeout bounds each Heartbeat call, measured on Clock. A call
	// still running then is abandoned as hung: its ctx is cancelled, an
	// ErrHung error is reported like any heartbeat error (OnHeartbeatError,
	// Pool.Err, forever_keepalive_heartbeats_total{outcome="hung"}), its
	// eventual result is ignored, and the next heartbeat starts an Interval
	// later as usual. Go cannot stop the abandoned goroutine, so a Heartbeat
	// that ignores ctx may still run beside the next one. Default Interval.
	HeartbeatTimeout time.Duration
	// OnHeartbeatError, when set, is called with every heartbeat error, in the
	// heartbeat goroutine. When nil, errors are logged. Either way the last
	// heartbeat's error is kept and returned by Pool.Err until the next
	// heartbeat succeeds or the agent becomes idle.
	OnHeartbeatError func(agent string, err error)
	// OnIdle, when set, is called when an agent's ref count has dropped to
	// zero and its heartbeat goroutine has exited, by the release call that
	// dropped it, after the Pool's lock is released. It may call Acquire.
	OnIdle func(agent string)
	// Clock defaults to SystemClock().
	Clock Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the metrics. Nil means not registered.
	Registerer prometheus.Registerer
}

// Validate checks the config after defaults are applied.
func (c *PoolConfig) Validate() error {
	if c.Interval <= 0 {
		return invalidf("pool config: interval %s must be positive", c.Interval)
	}
	if c.HeartbeatTimeout <= 0 {
		return invalidf("pool config: heartbeat timeout %s must be positive", c.HeartbeatTimeout)
	}
	return nil
}

func (c *PoolConfig) ensureDefaults() {
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = c.Interval
	}
	if c.Clock == nil {
		c.Clock = SystemClock()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Pool keeps agents alive: it counts keep-alive references per agent and,
// while an agent holds at least one, runs that agent's heartbeat goroutine.
// One Pool serves every agent of a process; an agent with no refs costs
// nothing. A Pool is safe for concurrent use.
type Pool struct {
	cfg     PoolConfig
	logger  *slog.Logger
	metrics *poolMetrics

	mu struct {
		sync.Mutex
		agents map[string]*agentRefs // agents with refs, or releasing their last one
		total  int
		closed bool
	}
}

// agentRefs is one agent's keep-alive state. Guarded by Pool.mu.
type agentRefs struct {
	refs int
	gen  int             // heartbeat generations started
	hb   *beat           // the running generation; nil when refs == 0 or the Pool is closed
	last <-chan struct{} // done channel of the latest generation started
	idle chan struct{}   // closed when the agent becomes idle
	err  error           // result of the latest heartbeat
}

// beat is one heartbeat goroutine.
type beat struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine has exited
}

// NewPool returns an empty Pool.
func NewPool(cfg PoolConfig) (*Pool, error) {
	cfg.ensureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newPoolMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("keepalive: pool metrics: %w", err)
	}
	p := &Pool{cfg: cfg, metrics: m, logger: cfg.Logger.With(logKeySubsystem, "keepalive")}
	p.mu.agents = map[string]*agentRefs{}
	return p, nil
}

// For returns the Keeper of one agent: a handle bound to the Pool and the
// agent id, holding no state of its own, so it may be kept or thrown away.
func (p *Pool) For(agent string) *Keeper { return &Keeper{p: p, agent: agent} }

// Acquire takes a keep-alive ref on agent and returns its release func. The
// first ref starts the agent's heartbeat goroutine. Calling release more than
// once releases once. The release of the last ref stops the heartbeat, waits
// for the goroutine to exit (cancelling the ctx of a heartbeat in progress,
// and waiting for that call at most until its HeartbeatTimeout) and then
// reports the agent idle.
func (p *Pool) Acquire(agent string) (release func()) {
	p.mu.Lock()
	st := p.mu.agents[agent]
	if st == nil {
		st = &agentRefs{idle: make(chan struct{})}
		p.mu.agents[agent] = st
	}
	st.refs++
	p.mu.total++
	p.metrics.refs.Inc()
	if st.refs == 1 && !p.mu.closed {
		p.startLocked(agent, st)
	}
	p.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { p.release(agent, st) }) }
}

// While holds a ref on agent while fn runs and returns fn's error. The ref is
// released when fn returns or panics.
func (p *Pool) While(ctx context.Context, agent string, fn func(ctx context.Context) error) error {
	release := p.Acquire(agent)
	defer release()
	return fn(ctx)
}

// Held returns the number of refs agent holds.
func (p *Pool) Held(agent string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := p.mu.agents[agent]; st != nil {
		return st.refs
	}
	return 0
}

// Total returns the number of refs held over all agents.
func (p *Pool) Total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.total
}

// Agents returns the ids of the agents holding refs, in no particular order.
// The caller owns the slice.
func (p *Pool) Agents() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.mu.agents))
	for a, st := range p.mu.agents {
		if st.refs > 0 {
			out = append(out, a)
		}
	}
	return out
}

// Idle returns a channel closed once agent is idle: no refs and no heartbeat
// goroutine. It is already closed when the agent holds no refs now. A later
// Acquire does not reopen it; call Idle again.
func (p *Pool) Idle(agent string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := p.mu.agents[agent]; st != nil {
		return st.idle
	}
	ch := make(chan struct{})
	close(ch)
	return ch
}

// Err returns the error of agent's latest heartbeat: nil after a success,
// before the first heartbeat and once the agent is idle. A lost lease is a
// *LeaseLostError (errors.Is(err, ErrLeaseLost)).
func (p *Pool) Err(agent string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := p.mu.agents[agent]; st != nil {
		return st.err
	}
	return nil
}

// Close stops every heartbeat goroutine and waits for them to exit. Refs
// stay counted and their release funcs keep working, but no heartbeat starts
// again. Close is idempotent.
func (p *Pool) Close() {
	p.mu.Lock()
	p.mu.closed = true
	var beats []*beat
	for _, st := range p.mu.agents {
		if st.hb != nil {
			beats = append(beats, st.hb)
			st.hb = nil
		}
	}
	p.mu.Unlock()
	for _, b := range beats {
		b.cancel()
		<-b.done
	}
}

// startLocked starts a new heartbeat generation for agent. It runs after the
// previous generation has exited, so two never overlap.
// REQUIRES: p.mu held.
func (p *Pool) startLocked(agent string, st *agentRefs) {
	ctx, cancel := context.WithCancel(context.Background())
	b := &beat{cancel: cancel, done: make(chan struct{})}
	prev := st.last
	st.gen++
	st.hb, st.last = b, b.done
	go p.heartbeat(ctx, agent, st, prev, b.done)
}

// release drops one ref of st.
func (p *Pool) release(agent string, st *agentRefs) {
	p.mu.Lock()
	if st.refs == 0 { // cannot happen: each release func runs once
		p.mu.Unlock()
		return
	}
	st.refs--
	p.mu.total--
	p.metrics.refs.Dec()
	if st.refs > 0 {
		p.mu.Unlock()
		return
	}
	b, gen := st.hb, st.gen
	st.hb = nil
	p.mu.Unlock()

	if b != nil {
		b.cancel()
		<-b.done
	}

	p.mu.Lock()
	// Idle unless a ref was taken (and maybe released) meanwhile; then the
	// release of that ref reports idleness.
	idle := st.refs == 0 && st.gen == gen && p.mu.agents[agent] == st
	if idle {
		delete(p.mu.agents, agent)
		close(st.idle)
	}
	p.mu.Unlock()
	if idle && p.cfg.OnIdle != nil {
		p.cfg.OnIdle(agent)
	}
}

// heartbeat calls the Heartbeat func every Interval until ctx is cancelled.
func (p *Pool) heartbeat(ctx context.Context, agent string, st *agentRefs, prev <-chan struct{}, done chan struct{}) {
	defer close(done)
	if prev != nil {
		<-prev // the previous generation was cancelled; it exits soon
	}
	for {
		t := p.cfg.Clock.NewTimer(p.cfg.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		err := p.beat(ctx, agent)
		if ctx.Err() != nil {
			return // released while beating: the result no longer matters
		}
		p.mu.Lock()
		st.err = err
		p.mu.Unlock()
		switch {
		case err == nil:
			p.metrics.heartbeats.WithLabelValues("ok").Inc()
			continue
		case errors.Is(err, ErrHung):
			p.metrics.heartbeats.WithLabelValues("hung").Inc()
		default:
			p.metrics.heartbeats.WithLabelValues("error").Inc()
		}
		if p.cfg.OnHeartbeatError != nil {
			p.cfg.OnHeartbeatError(agent, err)
		} else {
			p.logger.Warn("heartbeat failed", logKeyAgent, agent, "err", err, "lease_lost", errors.Is(err, ErrLeaseLost))
		}
	}
}

// beat runs one Heartbeat call for at most HeartbeatTimeout (on the Clock).
// When the bound is reached first, the call's ctx is cancelled, the call is
// abandoned (its goroutine runs on until it returns; the result is dropped)
// and an ErrHung error is returned. A cancelled ctx does not end the wait by
// itself: a call that honours ctx returns promptly, so release still waits
// for it and two generations' calls do not overlap.
func (p *Pool) beat(ctx context.Context, agent string) error {
	if p.cfg.Heartbeat == nil {
		return nil
	}
	_, err := callWithin(ctx, p.cfg.Clock, p.cfg.HeartbeatTimeout,
		func(ctx context.Context) error { return p.call(ctx, agent) },
		func() string {
			return fmt.Sprintf("keepalive: heartbeat of %q hung after %s", agent, p.cfg.HeartbeatTimeout)
		})
	return err
}

// call runs one Heartbeat call, turning a panic into an error.
func (p *Pool) call(ctx context.Context, agent string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("keepalive: heartbeat of %q panicked: %v", agent, r)
		}
	}()
	return p.cfg.Heartbeat(ctx, agent)
}

// Keeper is one agent's view of a Pool. Its methods are the Pool's, bound to
// the agent; it is safe for concurrent use and cheap to create.
type Keeper struct {
	p     *Pool
	agent string
}

// Agent returns the agent id.
func (k *Keeper) Agent() string { return k.agent }

// Acquire takes a ref; see Pool.Acquire.
func (k *Keeper) Acquire() (release func()) { return k.p.Acquire(k.agent) }

// While holds a ref while fn runs; see Pool.While.
func (k *Keeper) While(ctx context.Context, fn func(ctx context.Context) error) error {
	return k.p.While(ctx, k.agent, fn)
}

// Held returns the number of refs held; see Pool.Held.
func (k *Keeper) Held() int { return k.p.Held(k.agent) }

// Idle returns a channel closed once the agent is idle; see Pool.Idle.
func (k *Keeper) Idle() <-chan struct{} { return k.p.Idle(k.agent) }

// Err returns the latest heartbeat error; see Pool.Err.
func (k *Keeper) Err() error { return k.p.Err(k.agent) }
