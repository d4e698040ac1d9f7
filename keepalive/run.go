package keepalive

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/backoff"
)

// Run runs the schedules projector (unless SchedulerConfig.Views feeds the
// view) and fires due schedules until ctx is done (returning nil) or the
// projector stops with an error (returning it). On
// start it catches the view up with the log; schedules that came due while no
// Scheduler ran fire at once. Before returning it waits for the callbacks in
// flight, each at most until its CallbackTimeout; their ctx is cancelled, and
// a callback that fails (or hangs) because of that is not counted as an
// attempt (the schedule stays due and fires after the next start). Callbacks
// abandoned as hung are not waited for. Run may be called once.
func (s *Scheduler) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return ErrStopped
	}
	defer s.stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if s.pr == nil {
		// The schedules view is fed by SchedulerConfig.Views, whose owner
		// runs it and reports its errors.
		s.loop(ctx, nil)
		cancel()
		s.fires.Wait()
		return nil
	}
	prDone := make(chan error, 1)
	go func() { prDone <- s.pr.Run(ctx) }()
	prErr, prReturned := s.loop(ctx, prDone)
	cancel()
	s.fires.Wait()
	if !prReturned {
		prErr = <-prDone
	}
	return prErr
}

// loop waits for due schedules and starts their callbacks. It returns when
// ctx is done or the projector returned (prReturned).
func (s *Scheduler) loop(ctx context.Context, prDone <-chan error) (prErr error, prReturned bool) {
	select {
	case <-s.views.Ready():
	case prErr = <-prDone:
		return prErr, true
	case <-ctx.Done():
		return nil, false
	}
	for {
		now := s.cfg.Clock.Now()
		next := s.dispatch(ctx, now)
		changed := s.views.Changed()
		var timer Timer
		var due <-chan time.Time
		if !next.IsZero() {
			timer = s.cfg.Clock.NewTimer(next.Sub(now))
			due = timer.C()
			// The clock may have moved between Now and NewTimer.
			if !s.cfg.Clock.Now().Before(next) {
				timer.Stop()
				continue
			}
		}
		// Wake when the view changes: a schedule set or cancelled, by this
		// Scheduler or any writer of the log.
		select {
		case <-due:
		case <-s.wake:
		case <-changed:
		case prErr = <-prDone:
			prReturned = true
		case <-ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
		if prReturned || ctx.Err() != nil {
			return prErr, prReturned
		}
	}
}

// dispatch starts the callbacks of the schedules due at now that are not
// running yet, at most MaxInFlight at a time, and returns the due time of the
// first schedule not due yet (zero if none, or if the cap is reached: a
// finishing callback wakes the loop).
func (s *Scheduler) dispatch(ctx context.Context, now time.Time) time.Time {
	for kv, err := range s.view.Scan(duePrefix) {
		if err != nil { // not the end of the due list: log, retry on the next wake
			s.logger.Error("read due schedules", "err", err)
			return time.Time{}
		}
		nanos, agent, id, ok := parseDueKey(kv.Key)
		if !ok {
			continue
		}
		key := agent + "\x00" + id
		s.mu.Lock()
		_, running := s.mu.inFlight[key]
		full := len(s.mu.inFlight) >= s.cfg.MaxInFlight
		s.mu.Unlock()
		if running {
			continue
		}
		if at := time.Unix(0, nanos); at.After(now) {
			return at
		}
		if s.cfg.Owns != nil && !s.cfg.Owns(agent) {
			continue // its owner fires it
		}
		if full {
			return time.Time{}
		}
		sc, found, err := s.Get(agent, id)
		if err != nil || !found {
			s.logger.Error("schedule row missing or unreadable", logKeyAgent, agent, "id", id, "err", err)
			continue
		}
		if dueNanos(sc.NextAt) != nanos {
			// The scan read the view before an outcome moved this schedule
			// (a fire that ended while the scan ran), and the row is newer:
			// the occurrence of the key was fired already. Firing the row
			// would fire its next occurrence early, and twice
			// (TestOverdueFiresAfterRestart failed so once, under load).
			continue
		}
		s.mu.Lock()
		s.mu.inFlight[key] = struct{}{}
		s.mu.Unlock()
		s.fires.Add(1)
		go s.fire(ctx, sc, now)
	}
	return time.Time{}
}

// fire runs one attempt of sc's callback and records its outcome.
func (s *Scheduler) fire(ctx context.Context, sc Schedule, start time.Time) {
	defer s.fires.Done()
	defer func() {
		s.mu.Lock()
		delete(s.mu.inFlight, sc.Agent+"\x00"+sc.ID)
		s.mu.Unlock()
		s.poke()
	}()
	s.metrics.delay.Observe(max(0, start.Sub(sc.NextAt).Seconds()))
	cbErr := s.callBounded(ctx, sc)
	if cbErr != nil && (ctx.Err() != nil || errors.Is(cbErr, eventlog.ErrNotOwner)) {
		// Shutting down, or the agent's partition moved to another
		// process: not an attempt; the schedule stays due for its owner.
		if errors.Is(cbErr, ErrHung) {
			s.logger.Warn("schedule callback hung while stopping; abandoned", logKeyAgent, sc.Agent,
				"id", sc.ID, "callback", sc.Callback, "err", cbErr)
		}
		return
	}
	ev, outcome, fireErr := s.outcome(sc, cbErr, s.cfg.Clock.Now())
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), appendTimeout)
	seq, err := s.cfg.Log.Append(actx, ev)
	cancel()
	if err != nil && !errors.Is(err, eventlog.ErrDuplicate) {
		// The outcome is not recorded, so the schedule is still due: wait a
		// little before it may fire again rather than spin on a broken log.
		s.logger.Error("record schedule outcome", logKeyAgent, sc.Agent, "id", sc.ID, "type", ev.Type, "err", err)
		t := s.cfg.Clock.NewTimer(s.cfg.BackoffBase)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
		}
		return
	}
	s.metrics.fired.WithLabelValues(outcome).Inc()
	if fireErr != nil {
		attempted := sc
		attempted.Attempts = fireErr.Attempts
		attempted.LastError = cbErr.Error()
		if s.cfg.OnError != nil {
			s.cfg.OnError(attempted, fireErr)
		} else {
			s.logger.Warn("schedule callback failed", logKeyAgent, sc.Agent, "id", sc.ID, "callback", sc.Callback,
				"attempts", fireErr.Attempts, "final", fireErr.Final, "err", cbErr)
		}
	}
	// Keep the schedule in flight until the view shows the outcome, so the
	// loop never fires the same occurrence twice.
	_ = s.waitApplied(ctx, seq)
}

// callBounded runs the Fire callback for at most CallbackTimeout (on the
// Clock) and returns its error. When the bound is reached first, the
// callback's ctx is cancelled, the call is abandoned (it keeps running in its
// own goroutine until it returns; its result is dropped) and an ErrHung error
// is returned. The abandoned goroutine is not counted in s.fires, so neither
// Run nor the next firing of the schedule waits for it.
func (s *Scheduler) callBounded(ctx context.Context, sc Schedule) error {
	abandoned, err := callWithin(ctx, s.cfg.Clock, s.cfg.CallbackTimeout,
		func(ctx context.Context) error { return s.call(ctx, sc) },
		func() string { return fmt.Sprintf("callback hung after %s", s.cfg.CallbackTimeout) })
	if abandoned {
		s.metrics.hung.Inc()
	}
	return err
}

// call runs the Fire callback, turning a panic into an error.
func (s *Scheduler) call(ctx context.Context, sc Schedule) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("keepalive: callback %q of %q panicked: %v", sc.Callback, sc.Agent, r)
		}
	}()
	return s.cfg.Fire(ctx, sc)
}

// outcome builds the event recording an attempt of sc that ended at now with
// cbErr, the metrics outcome, and the error for OnError (nil on success).
func (s *Scheduler) outcome(sc Schedule, cbErr error, now time.Time) (eventlog.Event, string, *FireError) {
	now = now.UTC()
	d := OutcomeData{ID: sc.ID, Callback: sc.Callback, Due: sc.NextAt, Attempts: sc.Attempts + 1}
	typ, outcome := EventFired, outcomeOK
	var fireErr *FireError
	switch {
	case cbErr == nil:
		d.NextAt = sc.next(now, s.cfg.Location)
	case d.Attempts < s.cfg.MaxAttempts:
		typ, outcome = EventRetrying, outcomeRetry
		d.NextAt, d.Error = now.Add(backoff.Exp(s.cfg.BackoffBase, s.cfg.BackoffMax, d.Attempts)), cbErr.Error()
	default:
		typ, outcome = EventFailed, outcomeFailed
		d.NextAt, d.Error = sc.next(now, s.cfg.Location), cbErr.Error()
	}
	if cbErr != nil {
		fireErr = &FireError{Agent: sc.Agent, ID: sc.ID, Callback: sc.Callback, Attempts: d.Attempts,
			Final: typ == EventFailed, Err: cbErr}
	}
	ev, _ := eventlog.NewEvent(sc.Agent, typ, d) // OutcomeData always encodes
	ev.Time = now
	// A deterministic id: an outcome appended twice (a retried append) is
	// stored once.
	ev.ID = fmt.Sprintf("%s/%s/%d/%d/%d", sc.Agent, sc.ID, dueNanos(sc.CreatedAt), dueNanos(sc.NextAt), d.Attempts)
	return ev, outcome, fireErr
}
