// Package fiber runs durable functions, fibers, for one agent: each is
// recorded in the event log before it runs, can checkpoint a snapshot with
// Stash, and is handed to a recovery hook when a process died under it.
//
// # Model
//
// Every change is an event on the agent's events subject, appended (and so
// durable) before the Runner acts on it:
//
//	fiber.started   {id, name, createdAt}   before the function runs (with
//	                                        WithSnapshot, the first snapshot; with
//	                                        FirstStep, the first step's op.started;
//	                                        with tracing, traceparent: the span it was
//	                                        started under; with Config.Version,
//	                                        version: the code that started it;
//	                                        with Along, the caller's events right
//	                                        after it, in one chain)
//	fiber.stashed   {id, snapshot, attempts?} each Stash; replaces the snapshot (attempts: WithAttempts,
//	                                        or 0 when it is a recovered fiber's first progress;
//	                                        with AnnounceStep, nextOpId and nextKey: the next
//	                                        step's op.started)
//	fiber.completed {id, result?}           function returned nil, or called
//	                                        Complete: then after the function's
//	                                        own last events, in one chain; with
//	                                        CompleteIn, no record of its own: the
//	                                        function's last event carries it (the
//	                                        envelope's "completes": the fiber's
//	                                        id), and Records reads it back
//	fiber.failed    {id, error}             function returned an error or panicked
//	fiber.recovered {id, attempt}           before each call of the recovery hook
//	                                        (under another version: version, the
//	                                        Runner's, and the snapshot its policy
//	                                        set; restart: true for VersionRestart)
//	fiber.abandoned {id, attempts, reason}  recovery gave up
//	op.started      {fiber, opId, key}      before a Step's side effect
//	op.completed    {fiber, opId, result}   after it, with its result (and,
//	                                        attempts 0 when it is a recovered
//	                                        fiber's first progress; with
//	                                        ThenStash, the snapshot and
//	                                        attempts a fiber.stashed would hold;
//	                                        with ThenStep, nextOpId and nextKey:
//	                                        the next step's op.started)
//
// The runs table (RunsProjection, read through a Table) is a Pebble
// projection of those events over every agent: one Row per active fiber
// (ID, Agent, Name, Snapshot, Attempt, CreatedAt) and one Op per step of an
// active fiber. completed, failed and abandoned remove the row and its ops,
// and so does an event that carries a fiber's end (CompleteIn): every reader
// of fiber ends, here and above, reads such an event through EachRecord, as
// the two records it replaces.
// One Table serves all the Runners of a process; each Runner (one per agent)
// waits on it to read its own writes.
//
// A Runner's bookkeeping (which fibers it owns, what to do next for an
// orphan or a step) is a deterministic state machine without I/O; the
// Runner persists the matching event, then acts. User code is ordinary Go:
// it is not replayed. A recovered fiber resumes from its snapshot, and its
// steps from their recorded results.
//
// # Tracing
//
// With Config.TracerProvider, each Step is a "fiber.step" span (the child
// of the span in its ctx; forever.fiber.step.key, forever.fiber.op.id and
// forever.fiber.step.outcome: run, rerun, replayed or maybe_executed) and
// each recovery attempt a "fiber.recover" span around the hook
// (forever.fiber.id, name, attempt, and a forever.recovery event); an
// abandoned fiber gets a "fiber.abandon" span with the cause. fiber.started
// records the span the fiber was started under (its W3C traceparent; the
// runs view keeps it as Row.TraceParent, the hook gets it as
// Recovered.TraceParent), so a recovery after a crash continues that trace:
// fiber.recover is its child, and the resumed function runs under it
// again unless the hook resumed it under a span of its own. Without a
// provider nothing is traced and fiber.started is as before.
//
// # Invariants
//
//   - fiber.started is durable before the function runs: a fiber that ran
//     is always in the log.
//   - A stash is durable when Stash returns. Each stash replaces the whole
//     snapshot, and a fiber only ever writes its own row.
//   - An orphan (a row no live fiber of the Runner owns) is recovered once
//     per Recover call, and fiber.recovered with attempt n+1 is durable
//     before the hook sees it. A crash during recovery therefore shows up as
//     attempt n+2 on the next start, never as a silent second call of the
//     same attempt nor as a lost fiber; after MaxAttempts the fiber is
//     abandoned with fiber.abandoned and an *AbandonedError.
//   - The cap counts recoveries without progress, for every fiber. Progress
//     is a step completed in this run (a new op.completed, not a result
//     answered from its record) or a stash that changes the snapshot; the
//     first progress after a recovery carries attempts 0 in its event
//     (op.completed or fiber.stashed), so the count is reset in the log,
//     where the runs view and package verify read it. A fiber that makes
//     progress between crashes is never abandoned, however many crashes;
//     one that makes none (it dies, or stashes the snapshot it resumed
//     from, or replays recorded steps) is abandoned after MaxAttempts. A
//     fiber that keeps a budget of its own stashes WithAttempts(n): the
//     count is then n, and the default reset stays off for the rest of
//     that run (chat turns do this).
//   - Steps never silently repeat: a completed op returns its recorded
//     result; an op started but not completed reruns with the same op ID
//     (for the upstream's idempotency key) or, if Unsafe, fails with
//     ErrMaybeExecuted.
//   - A step's op.started is durable before its function runs, whichever
//     event carries it: op.started, fiber.started (FirstStep), the
//     previous step's op.completed (ThenStep) or a stash before it
//     (AnnounceStep). An op announced early counts as started from then
//     on, so a crash before it ran reruns it (or, Unsafe, reports it may
//     have executed): never a silent repeat.
//   - A step's op ID is a hash of the fiber ID, the step key and the
//     step's position among this run's calls with that key. A resumed
//     function that skips work it finished (per its snapshot) must use keys
//     that name the work (e.g. "llm-3"), not rely on positions alone.
//   - A fiber that last ran under another version than the Runner's
//     (Config.Version; Row.RanUnder) is recovered under its
//     VersionPolicy, decided before the hook runs: continue (after
//     Hooks.MigrateSnapshot), restart (no snapshot, Recovered.Restarted
//     until the fiber next stashes) or fail (fiber.failed with a
//     *VersionError, after Hooks.OnVersionFailed). A continue or restart
//     is recorded in the attempt's fiber.recovered with the new version
//     and the snapshot it set, so a crash after it neither migrates nor
//     restarts again; a fail records nothing before the fiber's end, so
//     a crash before it decides again, the same way (TestVersionPolicy).
//     Fibers started unversioned, and unversioned Runners, see no policy.
//   - Complete's chain is stored in order, so a crash leaves a prefix of
//     it, never the fiber's end without the events before it: the fiber
//     is recovered unless its end is stored (TestCompleteCrash). With
//     CompleteIn the end rides in the chain's last event, so the two are
//     stored together or not at all (TestCompleteCrash).
//   - A fiber that panics ends as fiber.failed and its caller (Run, Resume)
//     or Hooks.OnError (Go, GoResume) gets a *PanicError; the panic is not
//     re-raised.
//   - Close cancels running fibers; one that then returns an error is
//     interrupted: nothing is appended and its row stays for recovery.
//   - A running fiber holds a keepalive reference, except while it is Idle
//     (waiting for work done elsewhere, such as a chat turn awaiting its
//     sub-agents): its agent may then be deactivated, which closes the
//     Runner and interrupts the fiber as above (TestIdle).
//   - A process that no longer owns the agent writes nothing for it
//     (eventlog.OwnerLost: ErrNotOwner or ErrFenced from a fenced log). A
//     fiber that fails with it, or whose end cannot be appended for it, is
//     interrupted: no fiber.failed, no ErrOrphaned, nothing reported, its
//     row stays; a recovery that meets it stops (no further attempt, no
//     fiber.abandoned). The agent's new owner recovers the fiber and
//     decides its end, also when the old owner's lease looks valid again
//     just after the refusal (TestOwnerLostWritesNothing).
//
// # Usage
//
//	table, pr, err := fiber.OpenTable(lg) // once per process
//	go pr.Run(ctx)
//	<-table.Ready()
//
//	var r *fiber.Runner
//	r, err = fiber.New(fiber.Config{Log: lg, Table: table, Agent: "a1", KeepAlive: pool,
//		Hooks: fiber.Hooks{OnFiberRecovered: func(ctx context.Context, rec fiber.Recovered) error {
//			var st progress
//			if err := rec.Decode(&st); err != nil && !errors.Is(err, fiber.ErrNoSnapshot) {
//				return err
//			}
//			return r.GoResume(ctx, rec, func(ctx context.Context, f *fiber.Fiber) error {
//				return research(ctx, st)
//			})
//		}}})
//	err = r.Recover(ctx) // on start or takeover
//
//	id, err := r.Go(ctx, "research", func(ctx context.Context, f *fiber.Fiber) error {
//		return research(ctx, progress{})
//	})
//
//	func research(ctx context.Context, st progress) error {
//		for ; st.Step < 3; st.Step++ {
//			key := fmt.Sprintf("llm-%d", st.Step) // stable across resumes
//			summary, err := fiber.StepJSON(ctx, key, func(ctx context.Context, opID string) (string, error) {
//				return callLLM(ctx, opID) // opID as the idempotency key
//			})
//			...
//			if err := fiber.Stash(ctx, st); err != nil {
//				return err
//			}
//		}
//		return nil
//	}
package fiber
