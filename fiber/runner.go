package fiber

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/backoff"
	"github.com/forever-agents/forever/tracing"
)

// Log is the part of the event log a Runner uses. *eventlog.Log satisfies
// it.
type Log interface {
	Append(ctx context.Context, e eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error)
	LastSeq(ctx context.Context, f eventlog.Filter) (eventlog.Seq, error)
}

// KeepAlive is the part of keepalive a fiber uses: a reference held while a
// fiber runs or is being recovered keeps the agent active.
type KeepAlive interface {
	Acquire() (release func())
}

// Clock tells time. Tests pass a fake to control backoff and timestamps.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Hooks are the callbacks of a Runner.
type Hooks struct {
	// OnFiberRecovered is called by Recover once per orphan and attempt,
	// after fiber.recovered is durable. To continue the fiber, call
	// Runner.Resume (inline) or Runner.GoResume (background) with rec before
	// returning. Returning nil without resuming ends the fiber
	// (fiber.completed). Returning an error retries with backoff as a new
	// attempt, up to Config.MaxAttempts, then abandons it.
	OnFiberRecovered func(ctx context.Context, rec Recovered) error
	// OnError receives errors nobody else can return: *FailedError from
	// background fibers, *AbandonedError, corrupt rows found by Recover,
	// failures to record an event. Nil logs them.
	OnError func(ctx context.Context, err error)
	// MigrateSnapshot, when set, converts the snapshot of a fiber that
	// last ran under another version (rec.From) into the format of the
	// Runner's version, under VersionContinue, before OnFiberRecovered:
	// the result is recorded in fiber.recovered with the new version and
	// is the Snapshot OnFiberRecovered gets. It is called once per
	// version change: a crash after the record recovers the migrated
	// snapshot under the new version, with no second migration. An error
	// (or panic) fails the fiber as VersionFail does, with a
	// *VersionError wrapping it. Not called for a fiber without snapshot.
	MigrateSnapshot func(ctx context.Context, rec Recovered) (json.RawMessage, error)
	// OnVersionFailed is called, instead of OnFiberRecovered, for a fiber
	// that VersionFail (or a failed migration) ends; err is the
	// *VersionError. It may resume the fiber (Resume, GoResume) to end it
	// its own way: a chat turn ends its stream with an error chunk and
	// records turn.failed, and its function's error is recorded as
	// fiber.failed. Returning nil without resuming, or a nil hook:
	// fiber.failed records err. An error is retried as a recovery attempt.
	OnVersionFailed func(ctx context.Context, rec Recovered, err error) error
}

// Defaults for Config fields left zero.
const (
	DefaultMaxAttempts = 5
	DefaultBackoffBase = time.Second
	DefaultBackoffMax  = time.Minute
)

// Config configures a Runner. A zero field means "use the default".
type Config struct {
	// Log receives the agent's fiber events. Required.
	Log Log
	// Table is the runs table, shared by every Runner of the process.
	// Required.
	Table *Table
	// Agent is the agent whose fibers this Runner runs, a valid subject
	// token. Required.
	Agent string
	// KeepAlive is held while a fiber runs or is recovered. Nil: none.
	KeepAlive KeepAlive
	// Hooks are the recovery hook and the error sink.
	Hooks Hooks
	// MaxAttempts caps the recovery attempts of one fiber without
	// progress: a step completed or a snapshot changed after a recovery
	// resets the count (see Stash), as does Stash WithAttempts. Default 5.
	MaxAttempts int
	// BackoffBase and BackoffMax bound the wait before retrying a failed
	// recovery hook: base, 2*base, 4*base, ... at most max.
	// Defaults 1s and 1m.
	BackoffBase, BackoffMax time.Duration
	// Version is the version of the code the Runner runs (its agent
	// type's): fiber.started records it, and Recover applies
	// VersionPolicy to a fiber that last ran under another version. "":
	// unversioned; nothing is recorded and no policy applies (nor to a
	// fiber started unversioned).
	Version string
	// VersionPolicy is what Recover does with a fiber that last ran
	// under another version: VersionContinue (the default),
	// VersionRestart or VersionFail.
	VersionPolicy VersionPolicy
	// VersionPolicyOf, when set, is the policy of the fibers of a name
	// (VersionPolicy when it returns "" or an unknown policy): chat keeps
	// its queued messages whatever a turn's policy says.
	VersionPolicyOf func(name string) VersionPolicy
	// Clock defaults to the system clock.
	Clock Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the package's metrics. Nil: not registered.
	Registerer prometheus.Registerer
	// TracerProvider traces steps ("fiber.step") and recoveries
	// ("fiber.recover"), and fiber.started records the span a fiber was
	// started under so that its recovery continues that trace. Nil: off.
	TracerProvider trace.TracerProvider
}

func (c *Config) ensureDefaults() {
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = DefaultBackoffBase
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = max(DefaultBackoffMax, c.BackoffBase)
	}
	if c.VersionPolicy == "" {
		c.VersionPolicy = VersionContinue
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks the config after defaults are applied.
func (c *Config) Validate() error {
	switch {
	case c.Log == nil:
		return invalidf("config: Log is required")
	case c.Table == nil:
		return invalidf("config: Table is required")
	case !eventlog.ValidToken(c.Agent):
		return invalidf("config: agent %q is not a valid subject token", c.Agent)
	case c.MaxAttempts < 0:
		return invalidf("config: MaxAttempts must not be negative")
	case c.BackoffBase < 0 || c.BackoffMax < c.BackoffBase:
		return invalidf("config: need 0 <= BackoffBase <= BackoffMax")
	}
	if _, err := ParseVersionPolicy(string(c.VersionPolicy)); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// Runner runs the fibers of one agent: it records them in the log, holds a
// keepalive reference while they run, and recovers the ones a crashed
// process left behind. It is safe for concurrent use. Close it to cancel its
// fibers and wait for them.
type Runner struct {
	cfg     Config
	log     Log
	table   *Table
	logger  *slog.Logger
	metrics *metrics
	tracer  tracing.Tracer

	stop    context.Context // cancelled by Close
	stopFn  context.CancelFunc
	wg      sync.WaitGroup // fibers and recoveries in flight
	lastSeq atomic.Uint64  // highest sequence this Runner appended

	mu struct {
		sync.Mutex
		book book
	}
}

// New returns a Runner for cfg.Agent.
func New(cfg Config) (*Runner, error) {
	cfg.ensureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	r := &Runner{
		cfg: cfg, log: cfg.Log, table: cfg.Table, metrics: m,
		logger: cfg.Logger.With("subsystem", "fiber", "agent", cfg.Agent),
		tracer: tracing.New(cfg.TracerProvider, "fiber"),
	}
	r.stop, r.stopFn = context.WithCancel(context.Background())
	r.mu.book = newBook()
	return r, nil
}

// MaxAttempts returns the cap on a fiber's recovery attempts (Config's, or
// the default).
func (r *Runner) MaxAttempts() int { return r.cfg.MaxAttempts }

// Agent returns the agent the Runner runs fibers for.
func (r *Runner) Agent() string { return r.cfg.Agent }

// Close stops the Runner: new Run, Go, Resume and Recover calls return
// ErrStopped, the contexts of running fibers and recoveries are cancelled,
// and Close waits for them to return. A fiber whose function returns an
// error after Close began is interrupted, not failed: nothing is appended,
// its row stays, and the next Recover (in this or another process) recovers
// it. A fiber that returns nil is still recorded as completed.
func (r *Runner) Close() error {
	r.mu.Lock()
	r.mu.book.close()
	r.mu.Unlock()
	r.stopFn() // cancels every fiber's and recovery's context
	r.wg.Wait()
	return nil
}

// Wait blocks until every fiber and recovery in flight has returned, without
// cancelling them.
func (r *Runner) Wait() { r.wg.Wait() }

// Run runs fn as a new fiber named name and returns fn's error. fiber.started
// is durable before fn runs; a keepalive reference is held while it runs;
// when fn returns, fiber.completed (nil) or fiber.failed (an error, or a
// panic recovered into a *PanicError) is appended and the fiber's row
// removed. fn's context carries the fiber (FromContext, Stash, Step) and is
// cancelled when ctx is or the Runner closes.
//
// If the process dies while fn runs, the caller is gone; the fiber's row
// remains and Recover hands it to Hooks.OnFiberRecovered.
//
// Errors: fn's error; ErrStopped; ErrInvalid for an empty name; an append
// error (nothing ran when fiber.started could not be appended; when only the
// final event could not be, the row stays and is recovered later).
func (r *Runner) Run(ctx context.Context, name string, fn func(ctx context.Context, f *Fiber) error, opts ...RunOpt) error {
	f, err := r.start(ctx, name, opts)
	if err != nil {
		return err
	}
	return r.execute(ctx, f, fn)
}

// Go starts fn as a new background fiber and returns its ID once
// fiber.started is durable. The Runner owns the goroutine: Close cancels it
// and waits. fn runs under a context that keeps ctx's values but not its
// cancellation (a request's context usually ends before a background fiber
// does); it is cancelled by Close. fn's error reaches Hooks.OnError as a
// *FailedError.
func (r *Runner) Go(ctx context.Context, name string, fn func(ctx context.Context, f *Fiber) error, opts ...RunOpt) (string, error) {
	f, err := r.start(ctx, name, opts)
	if err != nil {
		return "", err
	}
	r.goExecute(ctx, f, fn)
	return f.id, nil
}

// RunOpt is an option of Run and Go.
type RunOpt func(*runOpts)

type runOpts struct {
	snapshot json.RawMessage
	err      error
	first    string
	unique   bool
	after    *eventlog.Seq
	along    func(id string) ([]eventlog.Event, error)
	alongOut *Alongside
}

// Unique makes the fiber's name name one unit of work (a chat turn): the
// Runner refuses to start or resume it, with ErrNameTaken and an error in
// its log, while a live fiber of the same name started Unique runs.
func Unique() RunOpt {
	return func(o *runOpts) { o.unique = true }
}

// AfterSeq makes the fiber's start conditional on the agent's log: its
// fiber.started is appended only if the agent's last event is still seq
// (eventlog.ExpectSeq), the one its caller read the log up to before
// deciding to start it. If anything of the agent was written since (another
// process that started the same unit of work, whose fiber this Runner's
// runs table may not show yet), nothing is appended and Go or Run returns
// an error wrapping eventlog.ErrConflict: the caller reads the log again.
func AfterSeq(seq eventlog.Seq) RunOpt {
	return func(o *runOpts) { o.after = &seq }
}

// WithSnapshot starts the fiber with v as its snapshot: fiber.started
// carries it, as if the fiber's first act were Stash(v), without a write
// of its own. A fiber recovered before its first Stash gets v.
func WithSnapshot(v any) RunOpt {
	return func(o *runOpts) {
		o.snapshot, o.err = encodeJSON("snapshot", v)
	}
}

// FirstStep records in fiber.started that the fiber's first Step with key
// has started: that Step writes no op.started of its own, so a fiber whose
// first act is a step starts it with one synced write, not two. The op
// counts as started from the fiber's start: after a crash before the step
// ran, a recovered fiber runs it again with the same op ID (or gets
// ErrMaybeExecuted for an Unsafe step), as after a crash between op.started
// and the effect.
func FirstStep(key string) RunOpt {
	return func(o *runOpts) { o.first = key }
}

// start claims a new fiber ID and appends fiber.started.
func (r *Runner) start(ctx context.Context, name string, opts []RunOpt) (*Fiber, error) {
	if name == "" {
		return nil, invalidf("empty fiber name")
	}
	var o runOpts
	for _, opt := range opts {
		opt(&o)
	}
	if o.err != nil {
		return nil, o.err
	}
	f := r.newFiber(nuid.Next(), name, r.cfg.Clock.Now().UTC(), 0, false, o.snapshot)
	f.unique = o.unique
	p := payload{ID: f.id, Name: name, Snapshot: o.snapshot, Version: r.cfg.Version}
	if r.tracer.On() {
		p.TraceParent = tracing.Format(trace.SpanContextFromContext(ctx))
	}
	if o.first != "" {
		p.OpID, p.Key = opID(f.id, o.first, 1), o.first
		f.mu.prestarted = p.OpID
	}
	if err := r.own(f); err != nil {
		return nil, err
	}
	if f.unique {
		if err := r.leftForRecovery(ctx, f); err != nil {
			r.abort(f)
			return nil, err
		}
	}
	created := f.createdAt
	p.CreatedAt = &created
	e, err := event(r.cfg.Agent, EventStarted, p)
	if err != nil {
		r.abort(f)
		return nil, err
	}
	e.ID = nuid.Next() // the same for a copy that settles an unknown fate
	var cond []eventlog.AppendOpt
	if o.after != nil {
		cond = append(cond, eventlog.ExpectSeq(*o.after))
	}
	if o.along != nil {
		err = r.startWith(ctx, f, e, cond, o)
	} else {
		_, err = r.startOne(ctx, f, e, cond)
	}
	if err != nil {
		r.abort(f)
		return nil, fmt.Errorf("fiber: start %q: %w", name, err)
	}
	r.metrics.started.Inc()
	return f, nil
}

// leftForRecovery returns ErrNameTaken when the runs table holds a fiber
// of f's name that this Runner does not run: one left for recovery, or
// being recovered, whose unit of work f would run a second time beside it.
// The table is read once it shows what this Runner appended (a recovered
// fiber's end); it may lag behind other writers' events by a few: it
// refuses what it shows, and the book refuses the rest of this Runner's own.
func (r *Runner) leftForRecovery(ctx context.Context, f *Fiber) error {
	if err := r.table.WaitFor(ctx, eventlog.Seq(r.lastSeq.Load())); err != nil {
		return err
	}
	for row, err := range r.table.scan(r.cfg.Agent) {
		if err != nil {
			return nil // unreadable rows: the book's check stands alone
		}
		if row.Name != f.name || row.ID == f.id {
			continue
		}
		r.mu.Lock()
		s := r.mu.book.slots[row.ID]
		r.mu.Unlock()
		if s != nil && s.state == slotRunning {
			continue // a fiber of ours not started Unique: the caller's choice
		}
		r.logger.Warn("refused a fiber whose name a fiber left for recovery holds", "fiber", f.id, "name", f.name, "recovering", row.ID)
		return fmt.Errorf("%w: fiber %s of %q is left for recovery", ErrNameTaken, row.ID, f.name)
	}
	return nil
}

// startUnknown reports whether err, an append's, leaves its fate
// unknown: not a refusal, nor a context that ended before the event was
// sent.
func startUnknown(err error) bool {
	switch {
	case eventlog.Refused(err):
		// Answered: JetStream refused it (over the account's storage,
		// among others) or it was never sent. Nothing lands later.
		return false
	}
	return true
}

// settleWithin bounds the settling of an append whose fate is unknown:
// well within JetStream's duplicate window (2 minutes by default), which
// makes the copies Settle sends harmless.
const settleWithin = time.Minute

// settleStart settles fiber.started (e) of f after its append failed with
// err, an unknown fate, under a context that outlives the caller's (whose
// deadline passed) but not the Runner. It returns nil when fiber.started
// is stored, and an error when it is not, or still unknown (the caller
// aborts f; a fiber.started that lands later is recovered as an orphan).
func (r *Runner) settleStart(ctx context.Context, f *Fiber, e eventlog.Event, err error) error {
	r.logger.Warn("fiber.started not confirmed; settling it before the fiber's name is let go", "fiber", f.id, "name", f.name, "err", err)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleWithin)
	defer cancel()
	stop := context.AfterFunc(r.stop, cancel)
	defer stop()
	seq, serr := eventlog.Settle(sctx, r.log, e)
	if serr != nil {
		return errors.Join(err, serr)
	}
	r.noteSeq(seq)
	r.logger.Info("fiber.started settled: stored", "fiber", f.id, "name", f.name, "seq", seq)
	return nil
}

// own registers f as running, takes a keepalive reference and counts it in
// the WaitGroup.
func (r *Runner) own(f *Fiber) error {
	r.mu.Lock()
	s, err := r.mu.book.start(f.id, f)
	if err == nil {
		r.wg.Add(1)
	}
	r.mu.Unlock()
	if errors.Is(err, ErrNameTaken) {
		// An invariant broken by the caller: say so loudly.
		r.logger.Error("refused a second live fiber of one unit of work", "fiber", f.id, "name", f.name, "err", err)
	}
	if err != nil {
		return err
	}
	f.slot = s
	if r.cfg.KeepAlive != nil {
		f.setRelease(r.cfg.KeepAlive.Acquire())
	}
	return nil
}

// disown undoes own once f is done.
func (r *Runner) disown(f *Fiber, outcome string) {
	r.mu.Lock()
	r.mu.book.release(f.id, f.slot)
	r.mu.Unlock()
	if rel := f.setRelease(nil); rel != nil {
		rel()
	}
	f.cancel()
	if outcome != "" {
		r.metrics.completed.WithLabelValues(outcome).Inc()
	}
	r.wg.Done()
}

// abort undoes own for a fiber whose function never ran.
func (r *Runner) abort(f *Fiber) {
	r.mu.Lock()
	r.mu.book.abort(f.id, f.slot)
	r.mu.Unlock()
	if rel := f.setRelease(nil); rel != nil {
		rel()
	}
	r.wg.Done()
}

// execute runs fn as f inline and records the outcome.
func (r *Runner) execute(ctx context.Context, f *Fiber, fn func(ctx context.Context, f *Fiber) error) error {
	fctx := f.bind(ctx, r.stop)
	_, err := r.finish(ctx, f, call(fctx, f, fn))
	return err
}

// goExecute runs fn as f in a goroutine owned by the Runner.
func (r *Runner) goExecute(ctx context.Context, f *Fiber, fn func(ctx context.Context, f *Fiber) error) {
	bg := context.WithoutCancel(ctx)
	fctx := f.bind(bg, r.stop)
	go func() {
		interrupted, err := r.finish(bg, f, call(fctx, f, fn))
		if err != nil && !interrupted {
			// Interrupted fibers are not failures: they wait for recovery.
			r.report(bg, &FailedError{ID: f.id, Name: f.name, Err: err})
		}
	}()
}

// call runs fn, turning a panic into a *PanicError.
func call(ctx context.Context, f *Fiber, fn func(ctx context.Context, f *Fiber) error) error {
	return protect(func() error { return fn(ctx, f) })
}

// protect runs fn, turning a panic into a *PanicError: for the fiber
// functions and hooks that user code supplies.
func protect(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return fn()
}

// finish records how f ended and releases it. It returns the error the
// caller sees and whether the fiber was interrupted by Close.
func (r *Runner) finish(ctx context.Context, f *Fiber, runErr error) (interrupted bool, _ error) {
	ctx = context.WithoutCancel(ctx)
	f.writeMu.Lock()
	f.markDone()
	defer f.writeMu.Unlock()
	if f.completed() {
		// Complete stored fiber.completed: the fiber is over, whatever
		// the function did after.
		if runErr != nil {
			r.logger.Warn("fiber returned an error after it completed; its end stands", "fiber", f.id, "name", f.name, "err", runErr)
		}
		r.disown(f, outcomeCompleted)
		return false, nil
	}
	if runErr != nil && r.stop.Err() != nil {
		r.logger.Info("fiber interrupted by shutdown, left for recovery", "fiber", f.id, "name", f.name, "err", runErr)
		r.disown(f, outcomeInterrupted)
		return true, runErr
	}
	if runErr != nil && eventlog.OwnerLost(runErr) {
		// This process no longer owns the agent: it writes nothing more
		// for it, not even the fiber's failure. The row stays for the new
		// owner, whose recovery decides how the fiber ends.
		r.logger.Info("fiber stopped: this process no longer owns the agent, its new owner recovers it", "fiber", f.id, "name", f.name, "err", runErr)
		r.disown(f, outcomeInterrupted)
		return true, runErr
	}
	if runErr != nil && LogFailed(runErr) {
		// The log, not the fiber, failed (a step's op.started was not
		// confirmed while a stream elected its leader): the fiber is not
		// over, so it is not recorded failed. It stays for recovery from
		// its last stash, and the host restarts the agent (ErrOrphaned).
		r.logger.Warn("fiber stopped by a log failure, left for recovery", "fiber", f.id, "name", f.name, "err", runErr)
		r.disown(f, outcomeInterrupted)
		r.report(ctx, fmt.Errorf("%w: fiber %s (%q) stopped by a log failure, left for recovery: %w", ErrOrphaned, f.id, f.name, runErr))
		return true, runErr
	}
	typ, p, outcome := EventCompleted, payload{ID: f.id}, outcomeCompleted
	if runErr != nil {
		typ, p, outcome = EventFailed, payload{ID: f.id, Error: runErr.Error()}, outcomeFailed
	}
	_, err := r.append(ctx, typ, p)
	if eventlog.OwnerLost(err) {
		// The row stays for the new owner; nothing to report here.
		r.logger.Info("fiber ended after this process lost the agent; its new owner recovers it", "fiber", f.id, "name", f.name, "err", err)
		r.disown(f, outcomeInterrupted)
		if runErr != nil {
			return true, runErr
		}
		return true, err
	}
	if err != nil {
		// The row stays: the fiber is an orphan and will be recovered.
		r.disown(f, "")
		err = fmt.Errorf("%w: record end of fiber %s (%q), it stays in the runs table: %w", ErrOrphaned, f.id, f.name, err)
		if runErr != nil {
			r.report(ctx, err)
			return false, runErr
		}
		return false, err
	}
	r.disown(f, outcome)
	return false, runErr
}

// LogFailed reports whether a fiber's error is the log's, not the
// fiber's: an append that JetStream could not take or confirm. A fiber
// that returns such an error is left for recovery, not recorded failed.
func LogFailed(err error) bool {
	return errors.Is(err, eventlog.ErrUnconfirmed) || eventlog.Unavailable(err)
}

// append appends one of the package's events for the Runner's agent and
// remembers its sequence.
func (r *Runner) append(ctx context.Context, typ string, p payload) (eventlog.Seq, error) {
	e, err := event(r.cfg.Agent, typ, p)
	if err != nil {
		return 0, err
	}
	return r.appendEvent(ctx, e)
}

// retryUnwritten runs write until it succeeds or fails otherwise than
// unwritten. A stream electing a leader refuses appends for a moment:
// wait it out (bounded) rather than fail the fiber. Only refusals that
// wrote nothing are sent again.
func (r *Runner) retryUnwritten(ctx context.Context, write func() (eventlog.Seq, error)) (eventlog.Seq, error) {
	seq, err := write()
	for n := 0; err != nil && eventlog.Unwritten(err) && n < unwrittenRetries; n++ {
		select {
		case <-ctx.Done():
			return 0, errors.Join(err, ctx.Err())
		case <-time.After(backoff.Exp(50*time.Millisecond, 2*time.Second, n)):
		}
		r.metrics.appendRetries.Inc()
		seq, err = write()
	}
	return seq, err
}

// appendEvent is append of an encoded event.
func (r *Runner) appendEvent(ctx context.Context, e eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	seq, err := r.retryUnwritten(ctx, func() (eventlog.Seq, error) { return r.log.Append(ctx, e, opts...) })
	if err != nil {
		return 0, err
	}
	r.noteSeq(seq)
	return seq, nil
}

// noteSeq remembers seq if it is the highest this Runner appended.
func (r *Runner) noteSeq(seq eventlog.Seq) {
	for {
		cur := r.lastSeq.Load()
		if uint64(seq) <= cur || r.lastSeq.CompareAndSwap(cur, uint64(seq)) {
			return
		}
	}
}

// unwrittenRetries bounds the resends of an append JetStream refused while
// electing a leader: about 30 s with the backoff above.
const unwrittenRetries = 20

// report hands err to Hooks.OnError, or logs it.
func (r *Runner) report(ctx context.Context, err error) {
	if r.cfg.Hooks.OnError != nil {
		r.cfg.Hooks.OnError(ctx, err)
		return
	}
	r.logger.Error("fiber error", "err", err)
}
