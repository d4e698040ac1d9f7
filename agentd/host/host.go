package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/quota"
	"github.com/forever-agents/forever/agents"
	"github.com/forever-agents/forever/compaction"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/internal/apierror"
	"github.com/forever-agents/forever/internal/backoff"
	"github.com/forever-agents/forever/keepalive"
	"github.com/forever-agents/forever/ownership"
	"github.com/forever-agents/forever/tracing"
)

// Config configures a Host. Zero fields take the defaults.
type Config struct {
	// IdleTimeout is how long an agent with no keepalive ref and no command in
	// flight stays active. Default: the daemon's Config.IdleTimeout (2m).
	IdleTimeout time.Duration
	// DefaultType is the type of agent ids no registered type claims; empty
	// means such ids are unknown (ErrNotFound).
	DefaultType string
	// MaxAttempts caps recovery attempts of a fiber (fiber.DefaultMaxAttempts).
	MaxAttempts int
	// BackoffBase is the first delay between recovery attempts.
	BackoffBase time.Duration
}

// Host is the agent runtime: it knows the registered agent types, activates
// an agent on first use, routes commands and due schedules to it, recovers
// its orphaned fibers after a restart, and deactivates it when idle.
//
// An agent id belongs to type T if it is T or starts with "T:" (for example
// "steps:demo"); otherwise to Config.DefaultType.
type Host struct {
	cfg   Config
	types map[string]Factory  // fixed once the daemon starts
	verbs map[string][]string // the command verbs of each type
	// unlisted are verbs agents send one another (SetUnlisted): served,
	// but never offered to a client in an unknown verb's answer.
	unlisted map[string]bool
	// details answer a type's status detail for an agent not active here
	// (SetStatusDetail); fixed once the daemon starts.
	details map[string]func(ctx context.Context, agent string) (any, error)
	// onDelete are the types' delete hooks (SetOnDelete); fixed once the
	// daemon starts.
	onDelete map[string]OnDelete
	// forking are the types' fork hooks (SetForking); fixed once the
	// daemon starts.
	forking map[string]Forking
	// versions are the types' versions and policies (SetVersion); fixed
	// once the daemon starts.
	versions map[string]TypeVersion

	path     path          // the command path (pipeline.go), built by New
	inflight chan struct{} // a slot per command being answered
	// refusalLog bounds the log lines of requests refused for their
	// reply subject (replyAdmitted).
	refusalLog *rate.Limiter
	handling   sync.WaitGroup // the commands being answered

	// Set by start, before run.
	daemon *agentd.Daemon
	deps   *agentd.Deps
	own    *ownership.Manager
	table  *fiber.Table
	quotas *quota.Enforcer // a tenant's daemon with quotas, else nil
	pool   *keepalive.Pool
	sched  *keepalive.Scheduler
	compac *compaction.Compactor
	logger *slog.Logger
	tracer tracing.Tracer
	active prometheus.Gauge
	// recovered counts the partitions held whose recovery finished
	// (forever_agentd_partitions_recovered).
	recovered prometheus.Gauge
	agents    *agents.View // the view of every agent
	// deleted counts deletes; bcast the broadcast and state messages
	// published; watchers the clients of GET /v1/agents/{id}/events.
	deleted prometheus.Counter
	bcast   *prometheus.CounterVec
	// agentEvents is the stream of the agents' broadcasts and state
	// changes (agentevents.go).
	agentEvents jetstream.Stream
	watchers    prometheus.Gauge

	ready    chan struct{}   // closed once startup recovery was started
	stopping <-chan struct{} // the daemon's Stopping, set by start
	wg       sync.WaitGroup

	mu struct {
		sync.Mutex
		ctx    context.Context // the host's run context, nil until run
		agents map[string]*instance
		parts  map[int]*part // partitions this node serves
		// deleting holds the agents a delete runs for on this node: they
		// are not activated meanwhile.
		deleting map[string]bool
		// rebuilding is set while the views are rebuilt after the log lost
		// the agents' events (storeLost): no agent is activated meanwhile.
		rebuilding error
	}
}

// part is a partition this node holds a lease on. Everything the host runs
// for the partition's agents lives under ctx, which ends when the lease is
// lost or handed off.
type part struct {
	lease     ownership.Lease
	ctx       context.Context
	recovered chan struct{} // closed once recovery of its agents started
}

type instance struct {
	id, typ string
	part    int
	env     *Env
	agent   Agent
	built   chan struct{} // closed once agent or err is set
	err     error

	// Guarded by Host.mu.
	inflight   int
	lastActive time.Time
	// metaSet: the agent's user context is known to be set, so the meta
	// of a command's payload is ignored without a look at the view.
	metaSet atomic.Bool
}

// New returns a Host; register types, then Attach it to a Daemon.
func New(cfg Config) *Host {
	h := &Host{cfg: cfg, types: map[string]Factory{}, verbs: map[string][]string{}, ready: make(chan struct{}),
		details:  map[string]func(context.Context, string) (any, error){},
		onDelete: map[string]OnDelete{}, forking: map[string]Forking{}, unlisted: map[string]bool{},
		versions:   map[string]TypeVersion{},
		inflight:   make(chan struct{}, MaxCommandsInFlight),
		refusalLog: rate.NewLimiter(1, 10)}
	h.mu.agents = map[string]*instance{}
	h.mu.parts = map[int]*part{}
	h.mu.deleting = map[string]bool{}
	h.buildPath()
	return h
}

// Register adds an agent type and the command verbs it answers: it is
// RegisterType(TypeSpec{Name: name, Factory: f, Verbs: verbs}), kept for
// programs that embed the host and register in several calls.
func (h *Host) Register(name string, f Factory, verbs ...string) error {
	return h.RegisterType(TypeSpec{Name: name, Factory: f, Verbs: verbs})
}

// SetStatusDetail sets TypeSpec.StatusDetail of a type registered before;
// kept for programs that register in several calls. Call it before the
// daemon starts.
func (h *Host) SetStatusDetail(typ string, fn func(ctx context.Context, agent string) (any, error)) error {
	return h.amend(typ, fn != nil, "status detail of agent type %q: register the type first, with a function", func() error {
		h.details[typ] = fn
		return nil
	})
}

// OnDelete is a type's hook around the delete verb: it is called on the
// agent's owner once the agent is stopped and the views hold its last
// event, before its events are deleted, so it can read what it needs of
// them; the func it returns, if not nil, is called once the delete is
// done (chat tells a deleted sub-agent's waiting parent). An error
// refuses the delete, which changed nothing.
type OnDelete func(ctx context.Context, agent string) (after func(ctx context.Context), err error)

// SetOnDelete sets TypeSpec.OnDelete of a type registered before; kept
// for programs that register in several calls. Call it before the daemon
// starts.
func (h *Host) SetOnDelete(typ string, fn OnDelete) error {
	return h.amend(typ, fn != nil, "delete hook of agent type %q: register the type first, with a function", func() error {
		h.onDelete[typ] = fn
		return nil
	})
}

// SetUnlisted marks verbs as internal (TypeSpec.Internal): agents send
// them one another (a child's notice to its parent), so the answer to an
// unknown verb does not list them among the verbs a client may send. Kept
// for programs that register in several calls. Call it before the daemon
// starts.
func (h *Host) SetUnlisted(verbs ...string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.ctx != nil {
		return agentd.ErrStarted
	}
	for _, v := range verbs {
		h.unlisted[v] = true
	}
	return nil
}

// listedVerbs are allVerbs but the unlisted ones: the verbs a client may
// send.
func (h *Host) listedVerbs() []string {
	return slices.DeleteFunc(h.allVerbs(), func(v string) bool { return h.unlisted[v] })
}

// takes reports whether agent type typ answers verb: the host's verbs, and
// those the type registered.
func (h *Host) takes(typ, verb string) bool {
	return slices.Contains(Verbs, verb) || slices.Contains(h.verbs[typ], verb)
}

// allVerbs returns the host's verbs and every type's, once each.
func (h *Host) allVerbs() []string {
	out := slices.Clone(Verbs)
	for _, vs := range h.verbs {
		for _, v := range vs {
			if !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	slices.Sort(out)
	return out
}

// TypeOf returns the type of an agent id, or ErrNotFound.
func (h *Host) TypeOf(id string) (string, error) {
	if !eventlog.ValidToken(id) {
		return "", apierror.BadAgentID("agent id", id)
	}
	name, _, _ := strings.Cut(id, ":")
	if _, ok := h.types[name]; ok {
		return name, nil
	}
	if h.cfg.DefaultType != "" {
		return h.cfg.DefaultType, nil
	}
	return "", ErrNotFound.Wrapf("no agent type claims %q (ids look like <type>:<name>)", id)
}

// Attach wires the host into d: the runs table, the keepalive pool, the
// scheduler, the NATS command service and the host loop start with d.
func (h *Host) Attach(d *agentd.Daemon) error {
	if h.cfg.DefaultType != "" {
		if _, ok := h.types[h.cfg.DefaultType]; !ok {
			return fmt.Errorf("%w: default agent type %q is not registered", agentd.ErrConfig, h.cfg.DefaultType)
		}
	}
	return d.OnStart(func(ctx context.Context, deps *agentd.Deps) error { return h.start(ctx, d, deps) })
}

func (h *Host) start(ctx context.Context, d *agentd.Daemon, deps *agentd.Deps) error {
	h.daemon = d
	h.deps = deps
	h.own = deps.Ownership
	h.stopping = d.Stopping()
	d.OnPartition(h.servePartition)
	d.OnIncoming(h.warmPartition)
	d.OnFenced(h.fenced)
	d.OnStoreLost(h.storeLost)
	h.logger = deps.Logger.With("subsystem", "host")
	h.tracer = tracing.New(deps.Config.TracerProvider, "host")
	if h.cfg.IdleTimeout <= 0 {
		h.cfg.IdleTimeout = deps.Config.IdleTimeout
	}
	table, err := fiber.AddTable(deps.Log, deps.Views)
	if err != nil {
		return err
	}
	h.table = table
	h.quotas = deps.Quotas
	if err := compaction.AddView(deps.Views); err != nil {
		return err
	}
	if err := h.addAgentsView(deps); err != nil {
		return err
	}
	if err := h.addAgentEventsStream(ctx, deps); err != nil {
		return err
	}
	h.compac, err = compaction.New(compaction.Config{
		Log:        deps.Log,
		Owns:       h.Serves,
		Events:     deps.Config.CompactEvents,
		Bytes:      deps.Config.CompactBytes,
		IdleEvents: deps.Config.CompactIdleEvents,
		Every:      deps.Config.CompactEvery,
		Logger:     deps.Logger,
		Registerer: deps.Registerer,
		Before:     h.detachForks,
	})
	if err != nil {
		return err
	}
	if err := d.Add("compactor", h.compac); err != nil {
		return err
	}
	h.pool, err = keepalive.NewPool(keepalive.PoolConfig{
		OnIdle:     h.touch,
		Logger:     deps.Logger,
		Registerer: deps.Registerer,
	})
	if err != nil {
		return err
	}
	h.sched, err = keepalive.NewScheduler(keepalive.SchedulerConfig{
		Log:             deps.Log,
		Owns:            h.Serves,
		Fire:            h.fire,
		OnError:         h.scheduleFailed,
		CallbackTimeout: deps.Config.ScheduleTimeout,
		Logger:          deps.Logger,
		Registerer:      deps.Registerer,
		Views:           deps.Views,
	})
	if err != nil {
		return err
	}
	if err := d.Add("scheduler", h.sched); err != nil {
		return err
	}
	h.active = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "forever_agentd_active_agents",
		Help: "Agents currently activated in this process.",
	})
	if err := deps.Registerer.Register(h.active); err != nil {
		return fmt.Errorf("agentd: register host metrics: %w", err)
	}
	h.recovered = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "forever_agentd_partitions_recovered",
		Help: "Partitions this node holds whose recovery finished (views caught up with the partition, its agents recovered); below forever_ownership_partitions_owned while partitions it acquired catch up.",
	})
	if err := deps.Registerer.Register(h.recovered); err != nil {
		return fmt.Errorf("agentd: register host metrics: %w", err)
	}
	if err := d.AddReady("recovery", h.ready); err != nil {
		return err
	}
	if err := h.startService(ctx, d, deps); err != nil {
		return err
	}
	return d.Add("host", agentd.ComponentFunc(h.run))
}

// run recovers orphaned fibers once the runs table is caught up, then
// deactivates idle agents until ctx is done; then it stops every agent.
func (h *Host) run(ctx context.Context) error {
	h.mu.Lock()
	h.mu.ctx = ctx
	h.mu.Unlock()
	defer h.stopAll()
	// Recovery runs per partition as its lease is acquired
	// (servePartition); the host is ready once the first round of leases
	// was taken and each of those partitions started its recovery.
	if err := h.awaitStartup(ctx); err != nil {
		return nil
	}
	h.logger.Info("startup recovery started", "partitions", h.own.OwnedCount())
	close(h.ready)

	tick := time.NewTicker(max(h.cfg.IdleTimeout/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			h.reap()
		}
	}
}

// Ready is closed once startup recovery has started for every agent with
// orphaned fibers.
func (h *Host) Ready() <-chan struct{} { return h.ready }

// activate returns the agent's instance, building it on first use. With
// busy, the instance is counted as in use from the moment it is found, so
// reap cannot deactivate it between the lookup and the caller's work; the
// caller then calls done(inst).
func (h *Host) activate(ctx context.Context, id string) (*instance, error) {
	return h.get(ctx, id, false)
}

func (h *Host) get(ctx context.Context, id string, busy bool) (*instance, error) {
	typ, err := h.TypeOf(id)
	if err != nil {
		return nil, err
	}
	pn := h.partitionOf(id)
	h.mu.Lock()
	hostCtx := h.mu.ctx
	if hostCtx == nil || hostCtx.Err() != nil {
		h.mu.Unlock()
		return nil, ErrUnavailable.Wrapf("host is not running")
	}
	pt := h.mu.parts[pn]
	if pt == nil || pt.ctx.Err() != nil {
		h.mu.Unlock()
		return nil, h.notOwner(id, pn)
	}
	if h.mu.deleting[id] {
		h.mu.Unlock()
		return nil, ErrConflict.Wrapf("agent %q is being deleted", id)
	}
	if err := h.mu.rebuilding; err != nil {
		h.mu.Unlock()
		return nil, err
	}
	inst, ok := h.mu.agents[id]
	if !ok {
		inst = &instance{id: id, typ: typ, part: pn, built: make(chan struct{}), lastActive: time.Now()}
		h.mu.agents[id] = inst
	}
	if busy {
		inst.inflight++
	}
	h.mu.Unlock()
	if ok {
		var err error
		select {
		case <-inst.built:
			err = inst.err
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil {
			if busy {
				h.done(inst)
			}
			return nil, err
		}
		return inst, nil
	}
	inst.err = h.build(ctx, pt.ctx, inst)
	if inst.err != nil {
		h.mu.Lock()
		delete(h.mu.agents, id)
		h.mu.Unlock()
	} else {
		h.active.Inc()
	}
	close(inst.built)
	if inst.err != nil {
		return nil, inst.err
	}
	return inst, nil
}

// done ends a busy use of inst.
func (h *Host) done(inst *instance) {
	h.mu.Lock()
	defer h.mu.Unlock()
	inst.inflight--
	inst.lastActive = time.Now()
}

// build constructs the agent and starts recovery of its orphaned fibers.
// partCtx is the context of the agent's partition: recovery stops with it.
func (h *Host) build(ctx, partCtx context.Context, inst *instance) error {
	hostCtx := partCtx
	logger := h.logger.With("agent", inst.id, "type", inst.typ)
	keeper := h.pool.For(inst.id)
	hooks := fiber.Hooks{
		OnFiberRecovered: func(ctx context.Context, rec fiber.Recovered) error {
			fr, ok := inst.agent.(FiberRecoverer)
			if !ok {
				return fmt.Errorf("agentd: agent type %s cannot recover fibers", inst.typ)
			}
			return fr.OnFiberRecovered(ctx, rec)
		},
		OnError: func(ctx context.Context, err error) {
			// An orphaned fiber is routine when the log is briefly
			// unavailable (a peer died, a stream elects its leader): the
			// agent restarts to recover it and says so at WARN, or its
			// next owner recovers it. It is not the agent's error.
			var ab *fiber.AbandonedError
			if errors.Is(err, fiber.ErrOrphaned) && !errors.As(err, &ab) {
				h.restartLater(partCtx, inst, err)
				return
			}
			if eh, ok := inst.agent.(ErrorHandler); ok {
				eh.OnError(ctx, err)
				return
			}
			logger.Error("agent error", "err", err)
		},
	}
	versionHooks(&hooks, inst)
	tv := h.VersionOf(inst.typ)
	w := h.deps.Log.Writer(inst.id)
	runner, err := fiber.New(fiber.Config{
		Log: w, Table: h.table, Agent: inst.id, KeepAlive: keeper, Hooks: hooks,
		Version: tv.Version, VersionPolicy: tv.Policy, VersionPolicyOf: policyOf(inst),
		MaxAttempts: h.cfg.MaxAttempts, BackoffBase: h.cfg.BackoffBase,
		Logger: h.deps.Logger, Registerer: h.deps.Registerer, TracerProvider: h.deps.Config.TracerProvider,
	})
	if err != nil {
		return err
	}
	inst.env = &Env{
		ID: inst.id, Type: inst.typ, Log: w, Fibers: runner, KeepAlive: keeper,
		Schedules: &Schedules{s: h.sched, agent: inst.id}, Logger: logger, Command: h.Command,
		pub: h.publisher(inst.id),
	}
	if h.deps.Config.AuditCommand != nil {
		id := inst.id
		inst.env.audit = func(ctx context.Context, action string, err error) { h.deps.Config.AuditCommand(ctx, id, action, err) }
	}
	inst.agent, err = h.types[inst.typ](ctx, inst.env)
	if err != nil {
		runner.Close()
		return fmt.Errorf("agentd: build agent %s: %w", inst.id, err)
	}
	// Recovery holds a ref so the agent is not deactivated under it.
	release := keeper.Acquire()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		defer release()
		h.recover(hostCtx, runner, logger)
	}()
	logger.Debug("agent activated")
	return nil
}

// recoverTries bounds the attempts of an agent's recovery that the log
// refuses for a while (a stream electing its leader during a failover).
const recoverTries = 8

// recover recovers the agent's orphaned fibers, trying again with backoff
// while the log is unavailable: an orphan nobody recovers would wait for
// the agent's next activation.
func (h *Host) recover(ctx context.Context, runner *fiber.Runner, logger *slog.Logger) {
	for try := 0; ; try++ {
		err := runner.Recover(ctx)
		switch {
		case err == nil || ctx.Err() != nil || errors.Is(err, fiber.ErrStopped):
			return
		case eventlog.Transient(err) && try+1 < recoverTries:
			wait := backoff.Exp(200*time.Millisecond, 5*time.Second, try+1)
			logger.Warn("recover fibers: the log is unavailable; trying again", "err", err, "in", wait)
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return
			}
		default:
			logger.Error("recover fibers", "err", err)
			return
		}
	}
}

// touch marks the agent active now (the keepalive pool calls it when the last
// ref is released).
func (h *Host) touch(agent string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if inst, ok := h.mu.agents[agent]; ok {
		inst.lastActive = time.Now()
	}
}

// reap deactivates agents idle for longer than IdleTimeout.
func (h *Host) reap() {
	now := time.Now()
	var idle []*instance
	h.mu.Lock()
	for id, inst := range h.mu.agents {
		select {
		case <-inst.built:
		default:
			continue
		}
		if inst.inflight == 0 && inst.env.KeepAlive.Held() == 0 && now.Sub(inst.lastActive) >= h.cfg.IdleTimeout {
			delete(h.mu.agents, id)
			idle = append(idle, inst)
		}
	}
	h.mu.Unlock()
	for _, inst := range idle {
		h.deactivate(inst)
	}
}

func (h *Host) deactivate(inst *instance) {
	h.stop(inst)
	h.mu.Lock()
	ctx := h.mu.ctx
	h.mu.Unlock()
	if ctx != nil && ctx.Err() == nil && h.compac.Enabled() {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			h.compac.Idle(ctx, inst.id)
		}()
	}
}

// stop tells the agent it is deactivated and closes its fibers (running
// ones are interrupted; their rows stay).
func (h *Host) stop(inst *instance) {
	if d, ok := inst.agent.(Deactivator); ok {
		h.callDeactivate(inst, d)
	}
	if err := inst.env.Fibers.Close(); err != nil {
		inst.env.Logger.Warn("close fibers", "err", err)
	}
	h.active.Dec()
	inst.env.Logger.Debug("agent deactivated")
}

// stopAll closes every agent's fibers (running ones are interrupted and stay
// in the runs table for the next start) and waits for recoveries.
func (h *Host) stopAll() {
	h.mu.Lock()
	agents := h.mu.agents
	h.mu.agents = map[string]*instance{}
	h.mu.Unlock()
	for _, inst := range agents {
		<-inst.built
		if inst.err == nil {
			h.deactivate(inst)
		}
	}
	h.wg.Wait()
	h.pool.Close()
}

// use runs fn with the agent active and counted as busy.
func (h *Host) use(ctx context.Context, id string, fn func(*instance) (any, error)) (any, error) {
	inst, err := h.get(ctx, id, true)
	if err != nil {
		return nil, err
	}
	defer h.done(inst)
	return fn(inst)
}

// fire routes a due schedule to its agent.
func (h *Host) fire(ctx context.Context, s keepalive.Schedule) error {
	_, err := h.use(ctx, s.Agent, func(inst *instance) (any, error) {
		sh, ok := inst.agent.(ScheduleHandler)
		if !ok {
			return nil, fmt.Errorf("agentd: agent type %s does not handle schedules", inst.typ)
		}
		release := inst.env.KeepAlive.Acquire()
		defer release()
		return nil, sh.OnSchedule(ctx, s)
	})
	return err
}

func (h *Host) scheduleFailed(s keepalive.Schedule, err error) {
	h.logger.Error("schedule failed", "agent", s.Agent, "schedule", s.ID, "callback", s.Callback, "err", err)
	h.mu.Lock()
	inst := h.mu.agents[s.Agent]
	h.mu.Unlock()
	if inst == nil {
		return
	}
	<-inst.built
	if eh, ok := inst.agent.(ErrorHandler); ok && inst.err == nil {
		eh.OnError(context.Background(), err)
	}
}

// Active reports whether the agent is activated in this process.
func (h *Host) Active(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.mu.agents[id]
	return ok
}
