package fiber

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/backoff"
)

// Recovered describes an orphaned fiber handed to Hooks.OnFiberRecovered.
type Recovered struct {
	ID   string
	Name string
	// Snapshot is the raw JSON of the fiber's last stash, nil if it never
	// stashed.
	Snapshot json.RawMessage
	// Attempt is this recovery attempt, from 1; fiber.recovered with it is
	// durable before the hook is called.
	Attempt   int
	CreatedAt time.Time
	// TraceParent is the W3C traceparent of the span the fiber was
	// started under, "" when it was started without tracing. The hook's
	// ctx carries a "fiber.recover" span, its child; a resumed fiber's
	// function runs under it again (unless the hook put a span of its own
	// in the ctx it resumes with).
	TraceParent string
	// Version is the version that started the fiber, From the one it
	// last ran under (Version, or a later recovery's), "" when
	// unversioned. When From is not the Runner's Config.Version, the
	// Runner's VersionPolicy applied: Snapshot is then the migrated one
	// (Hooks.MigrateSnapshot), or nil with Restarted.
	Version, From string
	// Restarted: VersionRestart dropped the snapshot; the fiber's
	// function should run again from its beginning. It stays set on
	// later recoveries until the fiber stashes a snapshot.
	Restarted bool
}

// Decode unmarshals the snapshot into v. It returns ErrNoSnapshot when the
// fiber never stashed (or stashed null), and a *eventlog.CorruptError
// (errors.Is(err, eventlog.ErrCorrupt)) when the snapshot does not decode
// into v; the raw bytes stay in Snapshot.
func (rec Recovered) Decode(v any) error {
	if len(rec.Snapshot) == 0 || string(rec.Snapshot) == "null" {
		return ErrNoSnapshot
	}
	if err := json.Unmarshal(rec.Snapshot, v); err != nil {
		return &eventlog.CorruptError{What: fmt.Sprintf("snapshot of fiber %s (%q)", rec.ID, rec.Name), Err: err}
	}
	return nil
}

// Recover hands every orphan of the Runner's agent to
// Hooks.OnFiberRecovered. Call it once the runs projection is ready, when
// the process starts or takes the agent over; Recover waits for the
// projection to reach the agent's last event first, so it sees what the
// previous owner wrote.
//
// An orphan is a row of the runs table that no fiber or recovery of this
// Runner owns. Each orphan is recovered exactly once per call, concurrently
// with the others; Recover returns when all are settled. For each:
//
//  1. fiber.recovered {id, attempt: n+1} is appended (n is the attempt in
//     the row, 0 for a fiber never recovered), and only then
//  2. the hook is called with a Recovered of that attempt, under a keepalive
//     reference.
//  3. Hook resumed the fiber (Resume, GoResume): the fiber goes on under its
//     ID. Hook returned nil without resuming: fiber.completed ends it. Hook
//     returned an error (or panicked): after a backoff, back to 1 with the
//     next attempt.
//  4. Once an attempt would exceed Config.MaxAttempts, fiber.abandoned is
//     appended and Hooks.OnError receives an *AbandonedError. With no hook
//     configured, an orphan is abandoned at once (cause ErrNoHook).
//  5. When this process turns out not to own the agent (an append, or the
//     hook, fails with eventlog.OwnerLost), the recovery stops there: no
//     further attempt, no fiber.abandoned, nothing reported; the owner
//     recovers the fiber.
//
// Because fiber.recovered is durable before the hook runs, a crash during
// the hook (or during the backoff) leaves the row with that attempt; the next
// Recover, in this process or another, runs attempt n+2. So each crash costs
// one attempt, the hook runs at most once per recorded attempt and never
// more than MaxAttempts times since the fiber last made progress (a step
// completed, a snapshot changed, or a stash WithAttempts reset the count),
// and an orphan is never silently dropped: it ends resumed, completed, or
// abandoned with an error.
//
// A row that cannot be decoded is reported to Hooks.OnError as an error
// naming the fiber and matching eventlog.ErrCorrupt, and left alone
// (rebuilding the runs projection from the log repairs it).
//
// Recover returns ctx's error if ctx ends first (recoveries in flight stop;
// their recorded attempts stand), ErrStopped after Close, or an error reading
// the log or the table.
func (r *Runner) Recover(ctx context.Context) error {
	if r.stop.Err() != nil {
		return ErrStopped
	}
	select {
	case <-r.table.Ready():
	case <-ctx.Done():
		return ctx.Err()
	}
	waited, err := r.catchUp(ctx)
	if err != nil {
		return fmt.Errorf("fiber: recover %s: %w", r.cfg.Agent, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(r.stop, cancel)()

	type orphan struct {
		row  Row
		slot *slot
	}
	// Read the whole table before claiming anything: a read error must not
	// pass for the end of the table, and leaves no fiber claimed.
	var rows []Row
	var errs []error
	for row, err := range r.table.scan(r.cfg.Agent) {
		var ce *eventlog.CorruptError
		if err != nil && !errors.As(err, &ce) {
			return fmt.Errorf("fiber: recover %s: %w", r.cfg.Agent, err)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rows = append(rows, row)
	}
	var orphans []orphan
	for _, row := range rows {
		r.mu.Lock()
		s, ok := r.mu.book.claim(row.ID)
		if ok {
			r.wg.Add(1)
		}
		r.mu.Unlock()
		if ok {
			orphans = append(orphans, orphan{row, s})
		}
	}
	for _, err := range errs {
		var ce *eventlog.CorruptError
		if errors.As(err, &ce) {
			r.report(ctx, fmt.Errorf("fiber: recover agent %s: cannot read the runs row (rebuild the runs projection): %w", r.cfg.Agent, err))
		}
	}
	// Only appends made before the claims can have ended a claimed fiber;
	// read that point once, not per orphan after the recoveries' own appends
	// (which made every orphan wait for the projection).
	seen := eventlog.Seq(r.lastSeq.Load())
	var wg sync.WaitGroup
	for _, o := range orphans {
		wg.Go(func() {
			defer r.wg.Done()
			row, ok, err := r.confirm(ctx, o.row, waited, seen)
			if err != nil || !ok {
				r.settle(o.row.ID, o.slot)
				if err != nil && ctx.Err() == nil {
					r.report(ctx, fmt.Errorf("fiber: recover fiber %s: %w", o.row.ID, err))
				}
				return
			}
			r.recoverOne(ctx, row, o.slot)
		})
	}
	wg.Wait()
	if r.stop.Err() != nil {
		return ErrStopped
	}
	return ctx.Err()
}

// catchUp waits until the runs table has applied the agent's last event and
// everything this Runner appended; it returns the sequence waited for.
func (r *Runner) catchUp(ctx context.Context) (eventlog.Seq, error) {
	last, err := r.log.LastSeq(ctx, eventlog.Filter{Agent: r.cfg.Agent})
	if err != nil {
		return 0, err
	}
	last = max(last, eventlog.Seq(r.lastSeq.Load()))
	if err := r.table.WaitFor(ctx, last); err != nil {
		return 0, err
	}
	return last, nil
}

// confirm re-reads row if this Runner appended after the table was caught up
// (a fiber of ours may have ended between the scan and the claim).
func (r *Runner) confirm(ctx context.Context, row Row, waited, seq eventlog.Seq) (Row, bool, error) {
	if seq <= waited {
		return row, true, nil
	}
	if err := r.table.WaitFor(ctx, seq); err != nil {
		return row, false, err
	}
	fresh, err := r.table.Get(r.cfg.Agent, row.ID)
	if errors.Is(err, eventlog.ErrNotFound) {
		return row, false, nil
	}
	return fresh, err == nil, err
}

// settle ends a claim; it reports whether the hook resumed the fiber.
func (r *Runner) settle(id string, s *slot) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.book.settle(id, s)
}

// recoverOne runs the attempts of one orphan; see Recover.
func (r *Runner) recoverOne(ctx context.Context, row Row, s *slot) {
	if r.cfg.KeepAlive != nil {
		defer r.cfg.KeepAlive.Acquire()()
	}
	log := r.logger.With("fiber", row.ID, "name", row.Name)
	last := row.Attempt
	var cause error
	for n := 0; ; n++ {
		attempt, abandon := nextAttempt(last, r.cfg.MaxAttempts)
		if r.cfg.Hooks.OnFiberRecovered == nil {
			abandon, cause = true, ErrNoHook
		}
		if abandon {
			if cause == nil {
				cause = ErrAttemptsExhausted
			}
			r.abandon(ctx, row, last, cause)
			r.settle(row.ID, s)
			return
		}
		if n > 0 {
			select {
			case <-r.cfg.Clock.After(backoff.Exp(r.cfg.BackoffBase, r.cfg.BackoffMax, n)):
			case <-ctx.Done():
				r.settle(row.ID, s)
				return
			}
		}
		rec := Recovered{ID: row.ID, Name: row.Name, Snapshot: row.Snapshot, Attempt: attempt, CreatedAt: row.CreatedAt, TraceParent: row.TraceParent,
			Version: row.Version, From: row.RanUnder(), Restarted: row.Restarted}
		if rec.Restarted {
			rec.Snapshot = nil
		}
		p := payload{ID: row.ID, Attempt: attempt}
		var verr *VersionError
		if vc, ok := r.versionChange(row); ok {
			log.Info("recovering a fiber that ran under another version", "from", vc.from, "to", vc.to, "policy", vc.policy)
			if err := r.applyVersion(ctx, vc, &p, &rec); err != nil {
				errors.As(err, &verr)
			}
		}
		if _, err := r.append(ctx, EventRecovered, p); err != nil {
			r.settle(row.ID, s)
			if eventlog.OwnerLost(err) {
				log.Info("recovery stopped: this process no longer owns the agent", "attempt", attempt, "err", err)
				return
			}
			if ctx.Err() == nil {
				// Still orphaned: the host restarts the agent to try again.
				r.report(ctx, fmt.Errorf("%w: recover fiber %s (%q): record attempt %d: %w", ErrOrphaned, row.ID, row.Name, attempt, err))
			}
			return
		}
		r.metrics.recovered.Inc()
		log.Info("recovering fiber", "attempt", attempt)
		if verr != nil {
			settled, err := r.failVersion(ctx, row, s, rec, verr)
			if settled {
				return
			}
			if ctx.Err() != nil || eventlog.OwnerLost(err) {
				r.settle(row.ID, s)
				return
			}
			log.Warn("version failure hook failed", "attempt", attempt, "err", err)
			last, cause = attempt, err
			continue
		}
		if p.Version != "" {
			// Recorded: a retry of this recovery runs under this version.
			row.LastVersion, row.Snapshot = p.Version, rec.Snapshot
		}
		hctx, span := r.startRecoverSpan(ctx, rec)
		err := r.callHook(hctx, rec)
		endSpan(span, err)
		if r.resumed(s) {
			if err != nil && !eventlog.OwnerLost(err) {
				r.report(ctx, fmt.Errorf("fiber: recovery hook of fiber %s (%q) resumed it and then failed: %w", row.ID, row.Name, err))
			}
			return
		}
		if eventlog.OwnerLost(err) {
			// The hook found the agent gone: no more attempts here, and
			// no abandonment; the new owner recovers the fiber.
			log.Info("recovery stopped: this process no longer owns the agent", "attempt", attempt, "err", err)
			r.settle(row.ID, s)
			return
		}
		if err == nil {
			// Handled without resuming: the fiber is over.
			if _, err := r.append(context.WithoutCancel(ctx), EventCompleted, payload{ID: row.ID}); eventlog.OwnerLost(err) {
				log.Info("recovered fiber not recorded completed: this process no longer owns the agent", "err", err)
			} else if err != nil {
				r.report(ctx, fmt.Errorf("%w: recover fiber %s (%q): record completion: %w", ErrOrphaned, row.ID, row.Name, err))
			} else {
				r.metrics.completed.WithLabelValues(outcomeCompleted).Inc()
			}
			r.settle(row.ID, s)
			return
		}
		if ctx.Err() != nil {
			// Stopping: attempt stays recorded, the next Recover goes on.
			r.settle(row.ID, s)
			return
		}
		log.Warn("recovery hook failed", "attempt", attempt, "err", err)
		last, cause = attempt, err
	}
}

// resumed reports whether the hook resumed the fiber of the claimed slot s.
// A slot not resumed stays claimed (for the retry or the completion).
func (r *Runner) resumed(s *slot) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.book.resumedBy(s)
}

// callHook calls the recovery hook, turning a panic into a *PanicError.
func (r *Runner) callHook(ctx context.Context, rec Recovered) error {
	return protect(func() error { return r.cfg.Hooks.OnFiberRecovered(ctx, rec) })
}

// abandon appends fiber.abandoned and reports an *AbandonedError.
func (r *Runner) abandon(ctx context.Context, row Row, attempts int, cause error) {
	ctx = context.WithoutCancel(ctx)
	_, span := r.startAbandonSpan(ctx, row, attempts, cause)
	defer endSpan(span, cause)
	n := attempts
	if _, err := r.append(ctx, EventAbandoned, payload{ID: row.ID, Attempts: &n, Reason: cause.Error()}); eventlog.OwnerLost(err) {
		r.logger.Info("fiber not abandoned: this process no longer owns the agent", "fiber", row.ID, "name", row.Name, "err", err)
		return
	} else if err != nil {
		r.report(ctx, fmt.Errorf("fiber: abandon fiber %s (%q): %w", row.ID, row.Name, err))
		return
	}
	r.metrics.completed.WithLabelValues(outcomeAbandoned).Inc()
	r.report(ctx, &AbandonedError{ID: row.ID, Name: row.Name, Attempts: attempts, Err: cause})
}

// Resume runs fn as the recovered fiber rec, inline, under rec.ID: no new
// fiber.started; Stash and Step work as in Run, Step returning the recorded
// results of ops completed by earlier runs; when fn returns, fiber.completed
// or fiber.failed ends the fiber and removes its row. Call it from
// Hooks.OnFiberRecovered (or later with a Recovered it received). It waits
// for the runs table to reach the agent's last event so earlier ops are
// visible.
//
// Errors: fn's error; ErrRunning if this Runner already runs the fiber;
// eventlog.ErrNotFound if the fiber is no longer active; ErrStopped;
// ErrNameTaken for a Unique fiber whose name a live fiber holds.
func (r *Runner) Resume(ctx context.Context, rec Recovered, fn func(ctx context.Context, f *Fiber) error, opts ...RunOpt) error {
	f, err := r.resume(ctx, rec, opts)
	if err != nil {
		return err
	}
	return r.execute(ctx, f, fn)
}

// GoResume is Resume in a background goroutine owned by the Runner, like Go:
// it returns once the fiber is claimed, fn's error reaches Hooks.OnError as
// a *FailedError, and Close cancels and waits for it.
func (r *Runner) GoResume(ctx context.Context, rec Recovered, fn func(ctx context.Context, f *Fiber) error, opts ...RunOpt) error {
	f, err := r.resume(ctx, rec, opts)
	if err != nil {
		return err
	}
	r.goExecute(ctx, f, fn)
	return nil
}

func (r *Runner) resume(ctx context.Context, rec Recovered, opts []RunOpt) (*Fiber, error) {
	if rec.ID == "" {
		return nil, invalidf("resume: empty fiber ID")
	}
	var o runOpts
	for _, opt := range opts {
		opt(&o)
	}
	f := r.newFiber(rec.ID, rec.Name, rec.CreatedAt, rec.Attempt, true, rec.Snapshot)
	f.unique = o.unique
	f.traceParent = rec.TraceParent
	if err := r.own(f); err != nil {
		return nil, err
	}
	if _, err := r.catchUp(ctx); err != nil {
		r.abort(f)
		return nil, fmt.Errorf("fiber: resume %s: %w", rec.ID, err)
	}
	if _, err := r.table.Get(r.cfg.Agent, rec.ID); err != nil {
		r.abort(f)
		return nil, fmt.Errorf("fiber: resume %s: %w", rec.ID, err)
	}
	return f, nil
}
