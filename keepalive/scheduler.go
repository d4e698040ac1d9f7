package keepalive

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults for SchedulerConfig fields left zero.
const (
	DefaultMaxAttempts = 5
	DefaultBackoffBase = time.Second
	DefaultBackoffMax  = 5 * time.Minute
	DefaultMaxInFlight = 16
	// DefaultCallbackTimeout bounds one run of a schedule's callback: a
	// callback still running after it is reset (its ctx cancelled, the
	// attempt recorded as hung and retried), as the Cloudflare Agents
	// design resets an alarm handler after 30 s.
	DefaultCallbackTimeout = 30 * time.Second
)

// appendTimeout bounds the append of a firing's outcome, which runs even while
// the Scheduler shuts down.
const appendTimeout = 10 * time.Second

// Log is the part of the event log a Scheduler uses. *eventlog.Log
// implements it.
type Log interface {
	Append(ctx context.Context, e eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error)
	NewProjector(p eventlog.Projection) (*eventlog.Projector, error)
	View(name string) (*eventlog.View, error)
}

var _ Log = (*eventlog.Log)(nil)

// SchedulerConfig configures NewScheduler. A zero field means "use the
// default".
type SchedulerConfig struct {
	// Log stores the schedule events and the schedules projection. Required;
	// it must have been opened with a Dir.
	Log Log
	// Fire runs a due schedule's callback: the host routes it to the agent,
	// activating the agent if needed. Required. It runs in its own goroutine
	// (at most MaxInFlight at a time); its ctx ends when Run ends. A nil
	// return records schedule.fired; an error records a retry or, after
	// MaxAttempts failures in a row, schedule.failed. A panic is an error.
	//
	// Fire must honour ctx: it is also cancelled when the callback has run
	// for CallbackTimeout. A callback still running then is abandoned, not
	// stopped (Go cannot kill a goroutine): the attempt is recorded as
	// failed with an ErrHung error, the schedule leaves the in-flight set so
	// it can fire again, and whatever the abandoned call returns later is
	// ignored. A callback that ignores ctx therefore may still be running
	// when the same schedule fires again.
	Fire func(ctx context.Context, s Schedule) error
	// Owns, when set, tells whether this process may fire an agent's
	// schedules now (in a cluster: whether it holds the lease of the
	// agent's partition). Schedules of other agents are left to their
	// owner; call Poke when ownership changes. Nil means every agent.
	Owns func(agent string) bool
	// OnError, when set, is called after each failed attempt has been
	// recorded, with the schedule as attempted and a *FireError (Final, and
	// matching ErrExhausted, on the last attempt). When nil, failures are
	// logged.
	OnError func(s Schedule, err error)
	// Clock defaults to SystemClock().
	Clock Clock
	// Location is where cron expressions are evaluated. Default UTC.
	Location *time.Location
	// MaxAttempts is the number of attempts of one occurrence before it is
	// given up. Default 5.
	MaxAttempts int
	// BackoffBase and BackoffMax bound the wait before retry n:
	// min(BackoffBase * 2^(n-1), BackoffMax). Defaults 1s and 5m.
	BackoffBase, BackoffMax time.Duration
	// MaxInFlight caps the callbacks running at once. Default 16. An
	// abandoned (hung) callback no longer counts.
	MaxInFlight int
	// CallbackTimeout bounds each run of Fire, measured on Clock. A
	// callback that has not returned by then is treated as hung: its ctx is
	// cancelled, a failed attempt "callback hung after CallbackTimeout" is
	// recorded exactly as a returned error would be (schedule.retrying, or
	// schedule.failed after MaxAttempts), and
	// forever_keepalive_callbacks_hung_total counts it. It also bounds how
	// long Run waits for a callback when it stops. Default 30s
	// (DefaultCallbackTimeout); a host that runs longer work in a callback
	// raises it (agentd: --schedule-timeout) or starts a fiber from the
	// callback instead.
	CallbackTimeout time.Duration
	// Views, when set, is the Follower of the events stream the schedules
	// projection joins (NewScheduler adds it), so the schedules view is fed
	// by the same consumer and batch as the process's other views. Its owner
	// runs it; Run then only waits for it, and Projector returns nil. When
	// nil, the Scheduler has its own Projector, run by Run.
	Views *eventlog.Follower
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the metrics. Nil means not registered.
	Registerer prometheus.Registerer
}

// Validate checks the config after defaults are applied.
func (c *SchedulerConfig) Validate() error {
	switch {
	case c.Log == nil:
		return invalidf("scheduler config: Log is required")
	case c.Fire == nil:
		return invalidf("scheduler config: Fire is required")
	case c.MaxAttempts < 1 || c.MaxInFlight < 1:
		return invalidf("scheduler config: MaxAttempts and MaxInFlight must be positive")
	case c.CallbackTimeout <= 0:
		return invalidf("scheduler config: CallbackTimeout %s must be positive", c.CallbackTimeout)
	case c.BackoffBase <= 0 || c.BackoffMax < c.BackoffBase:
		return invalidf("scheduler config: want 0 < BackoffBase (%s) <= BackoffMax (%s)", c.BackoffBase, c.BackoffMax)
	}
	return nil
}

func (c *SchedulerConfig) ensureDefaults() {
	if c.Clock == nil {
		c.Clock = SystemClock()
	}
	if c.Location == nil {
		c.Location = time.UTC
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = DefaultBackoffBase
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = max(DefaultBackoffMax, c.BackoffBase)
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.CallbackTimeout == 0 {
		c.CallbackTimeout = DefaultCallbackTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Scheduler keeps durable schedules (alarms) of every agent as events on the
// log and fires them when due, also after a restart. Create it with
// NewScheduler and run it with Run; its other methods are safe for concurrent
// use.
type Scheduler struct {
	cfg     SchedulerConfig
	logger  *slog.Logger
	metrics *schedulerMetrics
	pr      *eventlog.Projector // own projector, nil with SchedulerConfig.Views
	views   views               // pr or SchedulerConfig.Views
	view    *eventlog.View

	writes  chan struct{} // a one-slot semaphore serialising Schedule and Cancel
	wake    chan struct{} // pokes the Run loop
	running atomic.Bool
	stopped context.Context // done once Run has returned
	stop    context.CancelFunc
	fires   sync.WaitGroup

	mu struct {
		sync.Mutex
		inFlight map[string]struct{} // agent+"\x00"+id of callbacks running
	}
}

// NewScheduler registers the schedules projection on cfg.Log (so the Log
// must not register Projection() again) and returns a Scheduler. Nothing
// runs until Run.
func NewScheduler(cfg SchedulerConfig) (*Scheduler, error) {
	cfg.ensureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newSchedulerMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("keepalive: scheduler metrics: %w", err)
	}
	s := &Scheduler{
		cfg:     cfg,
		logger:  cfg.Logger.With(logKeySubsystem, "scheduler"),
		metrics: m,
		writes:  make(chan struct{}, 1),
		wake:    make(chan struct{}, 1),
	}
	s.stopped, s.stop = context.WithCancel(context.Background())
	s.mu.inFlight = map[string]struct{}{}
	if cfg.Views != nil {
		if err := cfg.Views.Add(s.Projection()); err != nil {
			return nil, fmt.Errorf("keepalive: %w", err)
		}
		s.views = cfg.Views
	} else {
		if s.pr, err = cfg.Log.NewProjector(s.Projection()); err != nil {
			return nil, fmt.Errorf("keepalive: %w", err)
		}
		s.views = s.pr
	}
	if s.view, err = cfg.Log.View(ProjectionName); err != nil {
		return nil, fmt.Errorf("keepalive: %w", err)
	}
	return s, nil
}

// Projection returns the definition of the schedules projection: every
// agent's events (Filter{}), of which Apply reads the schedule.* types. The
// Scheduler registers and runs it itself; use this to build the same view
// elsewhere (tools, tests).
func (s *Scheduler) Projection() eventlog.Projection { return projection(s.logger) }

// views is what a Scheduler waits on: its own Projector or the Follower of
// SchedulerConfig.Views.
type views interface {
	Ready() <-chan struct{}
	Changed() <-chan struct{}
	WaitFor(ctx context.Context, seq eventlog.Seq) error
}

// Projector returns the Scheduler's own projector, run by Run, or nil when
// the schedules view is fed by SchedulerConfig.Views. Use it to Rebuild the
// view; use WaitFor and Ready to wait for it.
func (s *Scheduler) Projector() *eventlog.Projector { return s.pr }

// Ready is closed once the schedules view caught up with the log.
func (s *Scheduler) Ready() <-chan struct{} { return s.views.Ready() }

// WaitFor blocks until the schedules view has applied stream sequence seq,
// ctx is done, or the projector stopped (an error wrapping
// eventlog.ErrStopped, or its error).
func (s *Scheduler) WaitFor(ctx context.Context, seq eventlog.Seq) error {
	return s.views.WaitFor(ctx, seq)
}

// Schedule stores a schedule for agent and returns it once the schedules view
// shows it. Run must be running (Schedule waits for Ready).
//
// Recurring schedules (Every, Cron) without an explicit Spec.ID are
// deduplicated: when the agent already has one with the same callback,
// payload (compared after JSON compaction) and interval or cron expression,
// that one is returned and nothing is appended. A Spec.ID that exists
// replaces that schedule.
//
// Errors: ErrInvalid, ErrStopped, ctx's error, or the log's. When the error
// comes after the append (ErrStopped, ctx), the schedule is stored anyway.
func (s *Scheduler) Schedule(ctx context.Context, agent string, spec Spec) (Schedule, error) {
	now := s.cfg.Clock.Now()
	sc, err := build(agent, spec, now, s.cfg.Location)
	if err != nil {
		return Schedule{}, err
	}
	if err := s.lockWrites(ctx); err != nil {
		return Schedule{}, err
	}
	defer s.unlockWrites()
	if sc.ID == "" && sc.Kind.Recurring() {
		existing, err := s.List(agent)
		if err != nil {
			return Schedule{}, err
		}
		for _, e := range existing {
			if sameRecurring(e, sc) {
				return e, nil
			}
		}
	}
	if sc.ID == "" {
		sc.ID = nuid.Next()
	}
	ev, err := eventlog.NewEvent(agent, EventSet, sc)
	if err != nil {
		return Schedule{}, err
	}
	ev.Time = now.UTC()
	seq, err := s.cfg.Log.Append(ctx, ev)
	if err != nil {
		return Schedule{}, fmt.Errorf("keepalive: schedule %q for %q: %w", sc.Callback, agent, err)
	}
	if err := s.waitApplied(ctx, seq); err != nil {
		return sc, err
	}
	s.poke()
	return sc, nil
}

// Cancel removes agent's schedule id. It reports whether the schedule existed
// (and a schedule.cancelled event was appended). A callback already running
// is not interrupted; its outcome no longer changes the view.
//
// Errors: ErrInvalid, ErrStopped, ctx's error, or the log's.
func (s *Scheduler) Cancel(ctx context.Context, agent, id string) (existed bool, err error) {
	if !eventlog.ValidToken(agent) || !eventlog.ValidToken(id) {
		return false, invalidf("cancel: agent %q or schedule id %q is not a valid subject token", agent, id)
	}
	if err := s.lockWrites(ctx); err != nil {
		return false, err
	}
	defer s.unlockWrites()
	if _, ok, err := s.Get(agent, id); err != nil || !ok {
		return false, err
	}
	ev, err := eventlog.NewEvent(agent, EventCancelled, CancelData{ID: id})
	if err != nil {
		return false, err
	}
	ev.Time = s.cfg.Clock.Now().UTC()
	seq, err := s.cfg.Log.Append(ctx, ev)
	if err != nil {
		return false, fmt.Errorf("keepalive: cancel schedule %s of %q: %w", id, agent, err)
	}
	if err := s.waitApplied(ctx, seq); err != nil {
		return true, err
	}
	s.poke()
	return true, nil
}

// List returns agent's schedules ordered by NextAt, then ID. It reads the
// view as committed: before Ready it may be behind the log. The caller owns
// the slice. A row that cannot be decoded is an eventlog.ErrCorrupt error.
func (s *Scheduler) List(agent string) ([]Schedule, error) {
	var out []Schedule
	for kv, err := range s.view.Scan(agentPrefix(agent)) {
		if err != nil {
			return out, err
		}
		sc, err := decodeRow(kv.Value)
		if err != nil {
			return out, err
		}
		out = append(out, sc)
	}
	slices.SortFunc(out, func(a, b Schedule) int {
		return cmp.Or(a.NextAt.Compare(b.NextAt), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// Get returns agent's schedule id, and whether it exists.
func (s *Scheduler) Get(agent, id string) (Schedule, bool, error) {
	v, err := s.view.Get(rowKey(agent, id))
	if errors.Is(err, eventlog.ErrNotFound) {
		return Schedule{}, false, nil
	}
	if err != nil {
		return Schedule{}, false, err
	}
	sc, err := decodeRow(v)
	return sc, err == nil, err
}

// lockWrites takes the write slot once the view is ready.
func (s *Scheduler) lockWrites(ctx context.Context) error {
	if s.stopped.Err() != nil {
		return ErrStopped
	}
	select {
	case <-s.views.Ready():
	case <-s.stopped.Done():
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case s.writes <- struct{}{}:
		return nil
	case <-s.stopped.Done():
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Scheduler) unlockWrites() { <-s.writes }

// waitApplied waits until the view has applied seq.
func (s *Scheduler) waitApplied(ctx context.Context, seq eventlog.Seq) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.stopped, cancel)()
	err := s.views.WaitFor(wctx, seq)
	if err != nil && ctx.Err() == nil && s.stopped.Err() != nil {
		return fmt.Errorf("%w: the schedule event is stored at seq %d", ErrStopped, seq)
	}
	return err
}

// Poke makes the Run loop look at the due schedules again: call it when
// SchedulerConfig.Owns changed its answer.
func (s *Scheduler) Poke() { s.poke() }

// poke wakes the Run loop.
func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
