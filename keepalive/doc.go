// Package keepalive keeps agents alive while they work, and wakes them when
// their durable schedules (alarms) come due, also after a restart.
//
// # Model
//
// Two independent parts.
//
// A Pool counts keep-alive references per agent, in memory. One Pool serves
// every agent of a process (agents are keys; an agent without refs costs
// nothing); Pool.For(agent) returns a Keeper, the agent-bound handle whose
// Acquire() (release func()) is what fibers and chat turns hold. While an
// agent holds at least one ref, a heartbeat goroutine calls
// PoolConfig.Heartbeat every Interval (default 10 s); in cluster mode that
// renews the agent's ownership lease. Heartbeats are not schedules: nothing is
// written to the log and Scheduler.List never shows them. When the last ref is
// released the agent is idle: Pool.Idle's channel closes and
// PoolConfig.OnIdle runs, and the host may deactivate the agent.
//
// A Scheduler keeps schedules as events on each agent's events subject:
// schedule.set (the Schedule), schedule.fired, schedule.retrying,
// schedule.failed (the error report after MaxAttempts failures) and
// schedule.cancelled. The "schedules" projection turns them into Pebble rows,
// one per schedule under "a\x00<agent>\x00<id>" (List) and an index
// "d\x00<due unix nanos, 20 digits>\x00<agent>\x00<id>" scanned in due order
// (Run). Kinds: Delay and At fire once and are removed after their callback
// succeeds (or is given up); Every and Cron recur, each outcome event carrying
// the next due time. Cron expressions use robfig/cron/v3 with a parser that
// takes the standard 5 fields, an optional leading seconds field, and
// descriptors (@daily, @every 1h), evaluated in SchedulerConfig.Location
// (default UTC). Run waits for the first due row, calls SchedulerConfig.Fire
// (the host routes it to the agent, activating it), appends the outcome, and
// waits until the view shows it before the schedule may fire again.
//
// # Invariants
//
//   - A release func releases once however often it is called; an agent's
//     ref count never goes below zero.
//   - An agent's heartbeat goroutine runs exactly while it holds refs: the
//     first Acquire starts it, the last release cancels it and returns only
//     after it exited. Two generations never overlap: a goroutine started by
//     a new Acquire first waits for the previous one to exit.
//   - Nothing waits on a user call without bound. A Heartbeat call running
//     longer than PoolConfig.HeartbeatTimeout (default Interval), and a
//     schedule callback running longer than SchedulerConfig.CallbackTimeout
//     (default 30s, as the Cloudflare design resets an alarm handler), is
//     hung: its ctx is cancelled, it is abandoned (Go cannot
//     stop a goroutine; its eventual result is ignored) and an ErrHung error
//     is reported. So Heartbeat and Fire must honour ctx; one that does not
//     may still run when the next heartbeat or firing of the same schedule
//     starts. A release, and Scheduler.Run's return, wait for a call in
//     progress at most until its bound.
//   - A heartbeat error is a value: Pool.Err returns the latest one, and
//     PoolConfig.OnHeartbeatError receives each. A lost lease is a
//     *LeaseLostError matching ErrLeaseLost; a hung heartbeat matches ErrHung,
//     and the next one starts an Interval later.
//   - The log is the truth for schedules; the rows are a view. Apply reads
//     only events (outcome events carry the next due time and the attempt
//     count), so dropping the Pebble data or Rebuild gives the same rows.
//   - A schedule is durable when Schedule returns, and the returned schedule
//     is visible to List. After a restart, schedules whose time passed fire
//     at once. Delivery is at least once: a crash between a callback's
//     success and the append of schedule.fired runs it again.
//   - A failing callback is retried with exponential backoff
//     (BackoffBase*2^(n-1), at most BackoffMax), the attempt count persisted
//     in schedule.retrying, so it survives restarts. A hung callback is a
//     failed attempt like any other (error "callback hung after <timeout>",
//     counted in forever_keepalive_callbacks_hung_total), and the schedule
//     leaves the in-flight set, so its retry fires. After MaxAttempts a
//     schedule.failed event is appended, OnError gets a *FireError matching
//     ErrExhausted, and a one-shot schedule is removed. Nothing is dropped
//     silently.
//   - Every and Cron schedules scheduled without an explicit ID are
//     deduplicated by agent, callback, payload (after JSON compaction) and
//     spec (interval or expression): scheduling the same again returns the
//     existing one. A different interval is a different schedule.
//   - The Scheduler fires every agent's schedules found in the log; with
//     several nodes, each must be given only the agents it owns (not done
//     yet: single-node for now).
//
// # JetStream message schedules
//
// nats-server 2.12+ can hold a due message itself (a stream with
// AllowMsgSchedules, published with a schedule header; nats.go's
// jetstream.WithScheduleAt), so an alarm would exist on the server while no
// agentd runs and could wake a host on delivery. It would fit as a delivery
// hint next to schedule.set: publish "fire <agent>/<id>" at NextAt to a
// schedules subject that agentd consumes and treats exactly like its own
// timer. The projection-driven timer stays the source of truth for now:
// eventlog does not enable AllowMsgSchedules, a server-side schedule knows
// nothing of our attempts, backoff and schedule.failed report, and it is not
// removed atomically with schedule.cancelled, so the log plus the view remain
// what decides whether and when a schedule fires.
//
// # Usage
//
//	pool, _ := keepalive.NewPool(keepalive.PoolConfig{Heartbeat: renewLease, OnIdle: deactivate})
//	release := pool.For("a1").Acquire()
//	defer release()
//	err := pool.For("a1").While(ctx, func(ctx context.Context) error { return work(ctx) })
//
//	s, _ := keepalive.NewScheduler(keepalive.SchedulerConfig{Log: lg,
//		Fire: func(ctx context.Context, sc keepalive.Schedule) error { return host.Deliver(ctx, sc) }})
//	go s.Run(ctx)
//	sc, err := s.Schedule(ctx, "a1", keepalive.Spec{Callback: "remind", Delay: time.Hour})
//	existed, err := s.Cancel(ctx, "a1", sc.ID)
package keepalive
