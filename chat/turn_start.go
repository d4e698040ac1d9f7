package chat

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/trace"
)

// start starts a turn, in steps: takeSlot waits for, or refuses at, the
// turn that holds the agent's turn slot and takes it; admitStart checks,
// under the slot and caught up with the log, what decides (a copy of the
// command is answered with its turn, sizes, an orphaned turn ended); goTurn
// starts the turn's fiber, which waits at its gate (runStarted), and
// stores turn.started, which carries the user message, if any, in one
// chain with its fiber.started (startChain); after a stale "turn"
// interrupt, the appends after fiber.started clear it and store
// turn.started (startAppends); and the gate tells the fiber what became
// of them.
//
// The slot is the command's until the gate opens, and the fiber's from
// then: it is released once, by whoever holds it (see slotHold).
//
// The turn's invoke_agent span starts here, under ctx's span or, for a
// turn answering a waiting call, under follows (the traceparent of the
// turn that asked), and is recorded in turn.started; the run that records
// the turn's outcome ends it.
func (a *Agent) start(ctx context.Context, t turnStarted, msg *Message, base []Part, follows string) (Turn, error) {
	if t.Version == "" {
		t.Version = a.cfg.Fibers.Version()
	}
	at, err := a.takeSlot(ctx, t.RequestID)
	if err != nil {
		return Turn{}, err
	}
	ok := false // the command owns the slot until the gate opens
	defer func() {
		if !ok {
			a.release(at)
		}
	}()
	// The gate says what the fiber does: run the turn once the views show
	// seq; end at once (errNotStored: nothing was stored); or stay for
	// recovery (another error), which finds out from the log whether
	// turn.started was stored.
	gate := make(chan started, 1)
	var (
		fid  string
		span trace.Span
		tctx context.Context
		sc   *startChain
	)
	for n := 0; ; n++ {
		orig, done, checked, err := a.admitStart(ctx, t, msg)
		if err != nil || done {
			return orig, err
		}
		// The turn's span: the fiber records it in fiber.started,
		// turn.started in its data.
		tctx, span = a.startTurnSpan(ctx, &t, msg, follows)
		if sc, err = a.chainStart(t, msg, checked); err != nil {
			failSpan(span, err)
			return Turn{}, err
		}
		// The fiber starts only if the log is still where the checks read
		// it: another process may have started this very turn meanwhile
		// (a copy of the command), and this Runner's runs table may not
		// show its fiber yet. Anything written since: check again.
		fid, err = a.goTurn(tctx, t, at, base, span, gate, checked, sc)
		if errors.Is(err, eventlog.ErrConflict) {
			failSpan(span, err)
			if n+1 < maxStartTries {
				a.logger.Info("the agent's log moved between a turn's checks and its fiber's start; checking again", "request", t.RequestID, "err", err)
				continue
			}
		}
		if err != nil {
			return Turn{}, err
		}
		break
	}
	ctx = tctx
	t.FiberID = fid
	var (
		seq eventlog.Seq
		e   eventlog.Event
	)
	if sc != nil {
		seq, e, err = sc.outcome(ctx)
	} else {
		seq, e, err = a.startAppends(ctx, t, msg)
	}
	if err != nil {
		ferr := startFailed(err)
		if errors.Is(ferr, errNotStored) {
			gate <- started{err: ferr}
			return Turn{}, err
		}
		// Sent, and no answer came: turn.started may be stored, now or
		// later (JetStream answers late while a stream elects its
		// leader). Letting the slot go would let a copy of the command,
		// or another one, start a second turn beside it; so the turn
		// holds it (pending) and its fiber settles the write. The
		// caller learns the write is unconfirmed; a copy sent meanwhile
		// waits for it (waitResolved), and is answered with this turn once
		// stored.
		ok = true
		a.logger.Warn("turn.started not confirmed; the turn keeps its slot while its fiber settles the write", "request", t.RequestID, "err", err)
		gate <- started{settle: &e}
		return Turn{}, fmt.Errorf("%w: turn %s is being confirmed; send the command again for its answer", eventlog.ErrUnconfirmed, t.RequestID)
	}
	// Stored: the turn is the fiber's from here, whatever becomes of ctx.
	ok = true
	a.stored(at)
	if err := a.crashPoint(ctx, pointSendStored); err != nil {
		return Turn{}, err
	}
	cursor := a.startCursor(ctx, t.StreamID)
	gate <- started{seq: seq}
	if err := a.store.WaitFor(ctx, seq); err != nil {
		return Turn{}, err
	}
	return Turn{RequestID: t.RequestID, StreamID: t.StreamID, MessageID: t.AssistantMessageID, Cursor: cursor}, nil
}

// takeSlot takes the agent's turn slot for the command of turn requestID
// (pending until it stores its turn.started). The turn that holds it is
// waited for, bounded, while it has not stored its turn.started or has
// ended its stream; a turn that runs is ErrTurnActive. A slot of
// Config.Turns is taken with it (ErrTooManyTurns past the bound).
func (a *Agent) takeSlot(ctx context.Context, requestID string) (*activeTurn, error) {
	at := newActiveTurn(requestID)
	at.pending = true
	a.mu.Lock()
	for a.mu.active != nil {
		cur := a.mu.active
		pending := cur.pending
		a.mu.Unlock()
		if pending {
			// The turn that holds the slot has not stored its turn.started
			// yet (its fate may be unknown, being settled): a copy of its
			// command waits to be answered with it, and another command to
			// learn whether it runs, rather than be refused while it may
			// yet be refused itself.
			if err := waitResolved(ctx, cur); err != nil {
				return nil, err
			}
			a.mu.Lock()
			if a.mu.active == cur {
				a.mu.Unlock()
				return nil, fmt.Errorf("%w: turn %s runs", ErrTurnActive, cur.requestID)
			}
			continue
		}
		if err := waitEnding(ctx, cur); err != nil {
			return nil, err
		}
		a.mu.Lock()
	}
	if err := a.cfg.Turns.acquire(false); err != nil {
		a.mu.Unlock()
		return nil, err
	}
	at.admitted = true
	a.mu.active = at
	a.mu.Unlock()
	return at, nil
}

// stored marks at's turn.started stored: the slot is no longer pending,
// and recoveries waiting for it look again.
func (a *Agent) stored(at *activeTurn) {
	a.mu.Lock()
	at.pending = false
	a.mu.Unlock()
	at.resolve()
}

// admitStart checks what decides whether the turn starts, under its slot
// and caught up with the log: a copy of the command is answered with its
// turn (done); a turn.started too large is refused before anything is
// written; a turn that waits for recovery refuses it, and an orphaned one
// (its fiber ended without an outcome) is ended first.
//
// checked is the agent's last event sequence the checks read the log up
// to; an orphaned turn ended here moves the log past it, so the fiber's
// conditional start fails and the checks run again.
func (a *Agent) admitStart(ctx context.Context, t turnStarted, msg *Message) (orig Turn, done bool, checked eventlog.Seq, err error) {
	if err := a.crashPoint(ctx, pointSendBegin); err != nil {
		return Turn{}, false, 0, err
	}
	checked, err = a.log.LastSeq(ctx, eventlog.Filter{Agent: a.agent})
	if err != nil {
		return Turn{}, false, 0, err
	}
	if err := a.store.WaitFor(ctx, checked); err != nil {
		return Turn{}, false, 0, err
	}
	if msg != nil {
		// Under the slot, caught up with the log: the check that decides.
		if orig, ok, err := a.sent(msg.ID, t.RequestID); err != nil || ok {
			return orig, true, 0, err
		}
	}
	// Check sizes first: nothing is half-written for being too large.
	if _, err := a.event(EventTurnStarted, t); err != nil {
		return Turn{}, false, 0, err
	}
	if cur, active, err := a.store.ActiveTurn(a.agent); err != nil {
		return Turn{}, false, 0, err
	} else if active && !cur.Orphaned {
		return Turn{}, false, 0, fmt.Errorf("%w: turn %s waits for recovery", ErrTurnActive, cur.RequestID)
	} else if active {
		// Its fiber ended without recording the outcome (the log failed
		// then): end it now rather than refuse every later turn.
		if err := a.endTurn(ctx, cur.RequestID, fmt.Sprintf("chat: turn %s ended without an outcome: its fiber ended (%s)", cur.RequestID, cur.FiberError)); err != nil {
			return Turn{}, false, 0, err
		}
	}
	return Turn{}, false, checked, a.crashPoint(ctx, pointSendChecked)
}

// maxStartTries bounds how often a turn's start checks the log again when
// the agent's log moved between its checks and its fiber.started.
const maxStartTries = 16

// goTurn starts the fiber of turn t, which waits at gate (runStarted).
// A fiber of the turn's name that runs already is ErrTurnActive.
// Its fiber.started is appended only if the agent's last event is still
// checked: anything written since is an error wrapping
// eventlog.ErrConflict, with nothing appended.
//
// With sc, turn.started goes in one chain with fiber.started (sc.along).
func (a *Agent) goTurn(ctx context.Context, t turnStarted, at *activeTurn, base []Part, span trace.Span, gate <-chan started, checked eventlog.Seq, sc *startChain) (string, error) {
	opts := []fiber.RunOpt{fiber.Unique(), fiber.AfterSeq(checked)}
	if sc != nil {
		opts = append(opts, fiber.Along(func(id string) ([]eventlog.Event, error) { return sc.build(ctx, id) }, &sc.out))
	}
	fid, err := a.cfg.Fibers.Go(ctx, TurnFiberPrefix+t.RequestID, func(fctx context.Context, f *fiber.Fiber) error {
		return a.runStarted(fctx, f, t, at, base, span, gate)
	}, opts...)
	if errors.Is(err, fiber.ErrNameTaken) {
		// A fiber of this turn's name is left for recovery, or being
		// recovered: the command waits for it (busy), and Send answers a
		// copy with the turn once the recovery shows it stored.
		failSpan(span, err)
		return "", fmt.Errorf("%w: turn %s is being recovered; send the command again", ErrTurnActive, t.RequestID)
	}
	if errors.Is(err, eventlog.ErrConflict) {
		return "", fmt.Errorf("chat: start turn: the log moved since it was checked: %w", err)
	}
	if err != nil {
		failSpan(span, err)
		return "", fmt.Errorf("chat: start turn: %w", err)
	}
	return fid, nil
}

// runStarted is the body of a started turn's fiber: it waits at gate for
// its command's appends and, unless nothing was stored (the command then
// gives the slot back), hands the turn and its slot to a run (turnRun.run).
// A turn that ran, or failed to, is ended if it failed (endOnFailure), and
// its parent told (afterTurn), once the run gave its slot back.
func (a *Agent) runStarted(fctx context.Context, f *fiber.Fiber, t turnStarted, at *activeTurn, base []Part, span trace.Span, gate <-chan started) error {
	var g started
	select {
	case g = <-gate:
	case <-fctx.Done():
		return fctx.Err()
	}
	if g.settle == nil && errors.Is(g.err, errNotStored) {
		// The command stored nothing and gives the slot back itself.
		a.endTurnSpan(fctx, span, errNotStored)
		return nil
	}
	// The slot is the run's from here: released once, or kept.
	defer a.checkSlot(at, "turn fiber")
	st := &turnRun{a: a, f: f, base: base, snap: snapshot{StreamID: t.StreamID, RequestID: t.RequestID}, span: span}
	st.hold(at)
	ran, err := st.run(fctx, g)
	if !ran {
		return err
	}
	err = a.endOnFailure(fctx, t.RequestID, err)
	a.endTurnSpan(fctx, span, err)
	return a.afterTurn(fctx, t.RequestID, err)
}

// run takes a started turn over from its command, g being what the command
// told the gate: it settles a turn.started of unknown fate, waits for the
// views to show the turn, and runs it. It holds the run's slot until it
// returns, and releases it then, or keeps it while turn.started's fate is
// unknown. ran is false when there was no turn to run: nothing was stored,
// the fate is left for recovery, or the views were not reached.
func (st *turnRun) run(fctx context.Context, g started) (ran bool, err error) {
	a := st.a
	defer st.release()
	if g.settle != nil {
		// The command's turn.started may be stored, now or later: the
		// turn keeps its slot until the log says which.
		g = a.settleStart(fctx, st.at, *g.settle)
		if g.err != nil && !errors.Is(g.err, errNotStored) {
			// Still unknown: left for recovery (the host restarts the
			// agent), holding the slot meanwhile.
			st.keep("its turn.started's fate is unknown")
			a.endTurnSpan(fctx, st.span, g.err)
			return false, g.err
		}
	}
	if errors.Is(g.err, errNotStored) {
		a.endTurnSpan(fctx, st.span, errNotStored)
		return false, nil // nothing was started; the fiber just ends
	}
	if g.err == nil {
		g.err = a.store.WaitFor(fctx, g.seq)
	}
	if g.err != nil {
		return false, g.err
	}
	info, err := a.store.Turn(a.agent, st.snap.RequestID)
	if err != nil {
		return true, err
	}
	st.info, st.b = info, turnBuilder(info)
	return true, st.runTurn(fctx)
}

// startCursor is the cursor a new turn's stream is followed from: the
// agent's last chunk before the turn's first, which cannot be written
// before the gate opens (one turn runs at a time). A failed read leaves 0,
// which follows the stream's own subject from its first chunk just as well.
// The agent's chunks are read before the turn's own, so chunks of the turn
// stored by another owner in between are seen by the second read. The
// owner's Log keeps that second read in the agent's fence
// (eventlog.Log.LastSeq), so the turn's first chunk is sent without
// reading its stream again.
func (a *Agent) startCursor(ctx context.Context, streamID string) eventlog.Seq {
	cursor, _ := a.log.LastSeq(ctx, eventlog.Filter{Agent: a.agent, Chunks: true})
	if cursor > 0 {
		// Across an ownership change the turn may have run elsewhere
		// already (this node stored it, then lost the agent, and the new
		// owner recovered it): a cursor after its chunks would follow
		// nothing. 0 follows the stream from its first chunk.
		if own, err := a.log.LastSeq(ctx, eventlog.Filter{Agent: a.agent, Stream: streamID, Chunks: true}); err != nil || own > 0 {
			cursor = 0
		}
	}
	return cursor
}

// started is what a turn fiber is told once its command's appends are
// done: the sequence to wait for, or why it must not run.
type started struct {
	seq eventlog.Seq
	err error
	// settle, when set, is the turn.started whose append's fate is
	// unknown: the fiber settles it (settleStart) before anything else.
	settle *eventlog.Event
}

// settleStart settles e, the turn.started of the turn at holds the slot
// for, whose append's fate is unknown: the slot stays pending until the
// log says where, or whether, it is stored. Stored: the turn is the
// fiber's and runs. Refused: nothing was started. Still unknown (the
// bound or the Runner ended first): the fiber is left for recovery, which
// reads the log, and the slot stays taken until the agent restarts, so
// nothing starts beside a turn that may yet land.
func (a *Agent) settleStart(ctx context.Context, at *activeTurn, e eventlog.Event) started {
	sctx, cancel := context.WithTimeout(ctx, settleWithin)
	defer cancel()
	seq, err := eventlog.Settle(sctx, a.log, e)
	switch {
	case err == nil:
		a.logger.Info("turn.started settled: stored", "request", at.requestID, "seq", seq)
		a.stored(at)
		return started{seq: seq}
	case errors.Is(startFailed(err), errNotStored):
		a.logger.Info("turn.started settled: not stored", "request", at.requestID, "err", err)
		return started{err: errNotStored}
	}
	return started{err: fmt.Errorf("%w: start turn %s: %w", eventlog.ErrUnconfirmed, at.requestID, err)}
}

// settleWithin bounds the settling of a turn.started whose fate is
// unknown: well within JetStream's duplicate window (2 minutes by
// default), which makes the copies Settle sends harmless.
const settleWithin = time.Minute

// errNotStored marks a failure to start a turn that stored nothing of it.
var errNotStored = errors.New("chat: the turn was not stored")

// startFailed is what a turn fiber is told when the appends that start
// its turn failed with err: errNotStored when turn.started cannot have
// been stored, else an error that leaves the fiber for recovery
// (fiber.LogFailed), since it may be in the log.
func startFailed(err error) error {
	switch {
	case errors.Is(err, errNotStored), errors.Is(err, eventlog.ErrDuplicate), eventlog.Refused(err):
		// Refused (JetStream answered: over the tenant's storage, a
		// limit; or the log did not send it): nothing of it is stored,
		// now or later, so the slot goes at once and the caller gets the
		// refusal (429 over quota, 503), not an unknown fate (504).
		return errNotStored
	case fiber.LogFailed(err):
		return err
	}
	return fmt.Errorf("%w: start the turn: %w", eventlog.ErrUnconfirmed, err)
}

// startAppends appends what starts a turn and returns the sequence the
// views must reach: interrupt.cleared for a stale "turn" interrupt (it
// must not abort the new turn), then turn.started, which carries the user
// message (msg) of a Send, so that the message and its turn are stored
// together or not at all. (Earlier releases also wrote the message as a
// message.appended of its own, for nodes that did not read it from
// turn.started yet.) An error wraps errNotStored when it came before
// turn.started was sent.
func (a *Agent) startAppends(ctx context.Context, t turnStarted, msg *Message) (eventlog.Seq, eventlog.Event, error) {
	if err := a.ClearInterrupt(ctx, InterruptTurn); err != nil {
		return 0, eventlog.Event{}, fmt.Errorf("%w: %w", errNotStored, err)
	}
	t, err := a.offloadTurnStarted(ctx, t)
	if err != nil {
		return 0, eventlog.Event{}, fmt.Errorf("%w: %w", errNotStored, err)
	}
	e, err := a.turnStartedEvent(t, msg)
	if err != nil {
		return 0, e, fmt.Errorf("%w: %w", errNotStored, err) // not sent
	}
	seq, err := a.log.Append(ctx, e)
	if err != nil {
		return 0, e, fmt.Errorf("chat: append %s: %w", EventTurnStarted, err)
	}
	return a.turnStored(ctx, seq, e, msg)
}

// turnStored is what follows a stored turn.started (e, at seq) of a Send
// (msg) before Send returns: its crash point.
func (a *Agent) turnStored(ctx context.Context, seq eventlog.Seq, e eventlog.Event, msg *Message) (eventlog.Seq, eventlog.Event, error) {
	if msg != nil {
		if err := a.crashPoint(ctx, pointSendTurnStored); err != nil {
			return 0, e, err
		}
	}
	return seq, e, nil
}

// turnStartedEvent encodes t, the turn.started of a Send of msg (nil for
// another command), with its id fixed before the append, so a copy that
// settles an unknown fate is the same event to JetStream.
func (a *Agent) turnStartedEvent(t turnStarted, msg *Message) (eventlog.Event, error) {
	e, err := a.event(EventTurnStarted, t)
	if err != nil {
		return e, err
	}
	e.ID = nuid.Next()
	if msg != nil {
		e.ID = sendEventID(a.agent, msg.ID)
		if t.rewrite != "" {
			e.ID = sendEventID(a.agent, msg.ID+"\x00rewrite\x00"+t.rewrite)
		}
	}
	return e, nil
}
