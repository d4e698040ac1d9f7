// Package eventlog is Forever's only door to JetStream and Pebble: every state
// change of an agent is an Event appended to a JetStream stream, and Pebble
// holds projections, views of the log rebuilt from it at any time.
//
// # Model
//
// Two streams, created or updated idempotently by Open:
//
//   - FOREVER_EVENTS, subjects <prefix>.evt.<agent>: an agent's lifecycle
//     events on one subject, so the per-subject sequence orders them and
//     fences writers (ExpectSeq).
//   - FOREVER_CHUNKS, subjects <prefix>.chunk.<agent>.<stream>: the chunks of
//     one chat stream, removed by age (default 24 h).
//
// An Event is an envelope {agent, stream, type, id, time, data}; the type and
// agent are also headers. The id is the JetStream message id, so a retried
// append within the duplicate window stores nothing new.
//
// A Projection is a name, a schema version, a Filter and an Apply function
// over a Batch. A Projector follows the log from the projection's cursor+1
// with an ordered consumer and commits each group of events' rows together
// with the new cursor in one synced Pebble batch. A Follower does the same
// for several projections of one stream with one consumer: each event is
// read once and applied to every projection whose Filter matches, their rows
// and cursors go into one batch, and read-your-writes waits on one cursor.
// A Projector is a Follower of one projection. A projection whose cursor is
// behind the others' (new, Version changed, Rebuild) catches up alone to
// them, then the Follower goes on with all of them.
//
// # Invariants
//
//   - An event is durable when Append returns: it returns only after
//     JetStream acknowledged it (with sync always, after the fsync).
//   - AppendBatch stores each atomic batch whole or not at all, with one
//     acknowledgement and one fsync per batch.
//   - A projection's rows and its cursor change in one synced Pebble batch,
//     so after any crash, also one that drops every unsynced write below
//     the page cache, the view equals the view rebuilt from the log up to
//     its cursor, and that cursor covers every sequence WaitFor confirmed
//     (TestCrashConsistency, on Pebble's crashable filesystem).
//   - A projection write Pebble cannot make (a full or failing disk) loses
//     nothing: the events stay in the log, the Followers stall (Log.Stalled
//     says so with ErrViewsStalled, and ErrStorageFull for a full disk, so
//     callers refuse new work; WaitFor waits), reads of the views go on,
//     and once a probe write succeeds Pebble is reopened and following
//     resumes by itself.
//   - Deleting the Pebble directory, or changing a projection's Version,
//     rebuilds the same view from the log.
//   - Compact keeps the log authoritative: an agent's rows in every view
//     are the same before and after its compaction, and in a view rebuilt
//     from an empty Pebble afterwards, also when the compaction stopped
//     between its snapshot append and its purge (TestCompactKeepsTheView).
//     The snapshot append expects the agent's last sequence, so a snapshot
//     never misses an event of the agent.
//   - A view follows one stream: when that stream was deleted and created
//     again, or the stored cursor is past its last sequence (a replaced
//     store, or writes lost under sync interval), the view is rebuilt from
//     the stream it now follows, never resumed. A stream deleted or purged
//     under running views is followed again after Log.RestartViews (which
//     agentd's store guard calls, with EnsureStream to create it again),
//     rebuilt from what it holds when asked (TestViewsFollowARestoredStream).
//   - A fenced append never takes the loss of what this process wrote for
//     another writer: a subject whose last sequence went back (a purge, a
//     deleted stream) is ErrRemoved, the fence reads the subject again, and
//     the next append goes on from the log; only a subject moved forward
//     by another token is ErrFenced (TestPurgeIsNotAnotherWriter).
//   - Follow yields every matching event after the cursor once and in order,
//     history then live, through a single ordered consumer.
//   - No wait for the server is unbounded: one that has no deadline of its
//     own ends after Config.AckTimeout. A lost acknowledgement of a publish
//     without an expected sequence is retried with the same message id,
//     so JetStream's dedup stores the event once.
//   - A scan that yields no error saw every row: read errors (ErrClosed
//     after Close, I/O errors) are yielded, never taken for the end.
//   - Projector.WaitFor and Follower.WaitFor never outlive Run: once Run
//     returned they return Run's error, or ErrStopped after a clean stop.
//   - Bad input (an agent id or type that is not a valid subject token, an
//     event larger than the server's max payload) is rejected with ErrInvalid
//     or ErrTooLarge before anything is sent; nothing stored changes. A stored
//     event that cannot be decoded is a *CorruptError naming its sequence.
//
// # Usage
//
//	lg, err := eventlog.Open(ctx, eventlog.Config{Conn: nc, Dir: "data/pebble"})
//	seq, err := lg.Append(ctx, eventlog.Event{Agent: "a1", Type: "note.added", Data: data},
//		eventlog.ExpectSeq(prev))
//	if errors.Is(err, eventlog.ErrConflict) { /* another writer won */ }
//
//	pr, err := lg.NewProjector(eventlog.Projection{Name: "notes", Version: 1,
//		Apply: func(b *eventlog.Batch, e eventlog.Event) error { return b.Set([]byte(e.ID), e.Data) }})
//	go pr.Run(ctx)
//	<-pr.Ready()
//	v, _ := lg.View("notes")
//	row, err := v.Get([]byte(id))
package eventlog
