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
// Sharded (Config.Shards K, shards.go), the partition p of the agent is in
// both subjects (<prefix>.evt.<p>.<agent>, <prefix>.chunk.<p>.<agent>.<stream>)
// and each kind has K streams, FOREVER_EVENTS_<k> and FOREVER_CHUNKS_<k>,
// shard k holding the partitions p mod K = k: each shard its own Raft
// group. A Seq of shard k is k<<SeqShardShift | its stream sequence, so
// every Seq names its stream. A Follower follows every shard, one ordered
// consumer each, with a cursor per shard and view; with Config.OwnedViews,
// only the partitions given to FollowPartition, with a cursor per
// partition and view.
//
// An Event is an envelope {agent, stream, type, id, time, completes, data};
// the type and agent are also headers. completes, when present, names a
// fiber the event also ends (package fiber writes and reads it; record
// format 11). The id is the JetStream message id, so a retried
// append within the duplicate window stores nothing new.
//
// A Projection is a name, a schema version, a Filter and an Apply function
// over a Batch. A Projector follows the log from the projection's cursor+1
// with an ordered consumer and commits each group of events' rows together
// with the new cursor in one Pebble batch. A Follower does the same
// for several projections of one stream with one consumer: each event is
// read once and applied to every projection whose Filter matches, their rows
// and cursors go into one batch, and read-your-writes waits on one cursor.
// A Projector is a Follower of one projection. A projection whose cursor is
// behind the others' (new, Version changed, Rebuild) catches up alone to
// them, then the Follower goes on with all of them. A projection with a
// Bootstrap is not replayed when it starts from nothing: it builds its rows
// from what it reads of the log (Log.Ends: each subject's first and last
// event, two gets a subject), commits them with the cursor Ends returned,
// and follows from there; the chunks stream's streams view does, so its
// rebuild costs what the chat streams cost, not their chunks.
//
// # Invariants
//
//   - An event is durable when Append returns: it returns only after
//     JetStream acknowledged it (with sync always, after the fsync).
//   - AppendBatch stores each atomic batch whole or not at all, with one
//     acknowledgement and one fsync per batch.
//   - AppendAll stores several events of one agent in one round trip, in
//     order and with nothing of another writer between them; a failure part
//     way leaves a prefix, never a gap (TestAppendAll). Concurrent
//     AppendAlls share the stream's group commit; in an atomic batch each
//     one's events are side by side (TestAppendAllInterleaved).
//   - Batcher.Replace changes only an event still queued: once Run took it
//     into a batch it is sent as it was (TestBatcherReplace).
//   - Group commit: Appends of lifecycle events that come while another is
//     being sent wait and go out together as the next send, one atomic
//     batch (one fsync under sync always; stored whole or not at all,
//     TestGroupCommitCrash SIGKILLs a child process mid-batch) or pipelined,
//     whichever the measured costs say is cheaper. Each Append still gets
//     its own answer: a batch refused for one append's expected sequence
//     (a stale owner) is sent again one by one, so that append fails alone
//     and the others are stored (TestGroupCommitFencing). An Append that
//     finds nothing in flight is sent at once: a lone writer never waits.
//   - A group sent pipelined (a Batcher's chunks on an R1 stream; a
//     replicated stream takes every group as an atomic batch,
//     TestReplicatedGroupsAreAtomic) is a chain: every message
//     after the first expects the one before it to be the stream's last, so
//     the server stores a prefix of the group in order and refuses the
//     rest; nothing of another writer lands inside it, and a stale owner's
//     chunks after its refused first one never land (TestFenceChunksInGroup).
//   - A projection's rows and its cursor change in one Pebble batch; the
//     WAL is synced within 10 ms of a commit (in the background, once for
//     every commit made meanwhile), before every purge of a stream, and
//     before WaitDurable returns. So after any crash, also one that drops
//     every unsynced write below the page cache, the view equals the view
//     rebuilt from the log up to its cursor, that cursor covers every
//     sequence WaitDurable confirmed (TestCrashConsistency, on Pebble's
//     crashable filesystem), and the stream still holds every event after
//     it. WaitFor makes rows visible without waiting for the sync.
//     The funcs an Apply registers with Batch.AfterCommit run once the
//     batch is committed, seeing its rows, and before a WaitFor of its
//     sequences returns (TestBatchAfterCommit).
//   - A projection write Pebble cannot make (a full or failing disk) loses
//     nothing: the events stay in the log, the Followers stall (Log.Stalled
//     says so with ErrViewsStalled, and ErrStorageFull for a full disk, so
//     callers refuse new work; WaitFor waits), reads of the views go on,
//     and once a probe write succeeds Pebble is reopened and following
//     resumes by itself.
//   - Deleting the Pebble directory, or changing a projection's Version,
//     rebuilds the same view from the log (by replay, or by the
//     projection's Bootstrap, whose rows equal a replay's and whose Apply
//     takes an event its rows already reflect as applied).
//   - Compact keeps the log authoritative: an agent's rows in every view
//     are the same before and after its compaction, and in a view rebuilt
//     from an empty Pebble afterwards, also when the compaction stopped
//     between its snapshot append and its purge (TestCompactKeepsTheView).
//     The snapshot append expects the agent's last sequence, so a snapshot
//     never misses an event of the agent.
//   - Delete removes an agent: after it, the log holds the agent's two
//     tombstones (TypeDeleted, one on its events subject, one on its
//     DeletedStream chunks subject) and nothing before them, and no view
//     with AgentRows holds a row of it, live or rebuilt from an empty
//     Pebble, also when events before the tombstone survived a purge
//     (TestDeleteRemovesTheAgent, TestTombstoneSupersedesLeftovers).
//     Events after the tombstone start a new agent with the same id from
//     nothing. Apply never sees an events tombstone; a view that keeps a
//     figure over every agent's rows (chat's tenant totals) is told of
//     the rows a tombstone or a snapshot removes and sets
//     (Projection.RowsChanged), so such a figure stays what a rebuild
//     gives (TestRowsChangedKeepsTotals).
//   - A view follows one stream: when that stream was deleted and created
//     again, or the stored cursor is past its last sequence (a replaced
//     store, or writes lost under sync interval), the view is rebuilt from
//     the stream it now follows, never resumed. A stream deleted or purged
//     under running views is followed again after Log.RestartViews (which
//     agentd's store guard calls, with EnsureStream to create it again),
//     rebuilt from what it holds when asked (TestViewsFollowARestoredStream).
//   - A Batcher event chained behind another (After) is stored only if that
//     one was: chained events that fail take the ones queued behind them
//     down, so a chat stream written in order never has a gap
//     (TestChainedChunksLeaveNoGap).
//   - A refusal of a fenced append whose subject is where the writer left
//     it (a stream leader behind its log during an election refuses with
//     "wrong last sequence") is not another writer: it fences nobody, is
//     sent again, and fails, if it keeps coming, as ErrUnavailable and
//     Unwritten (TestLeaderBehindIsNotAWriter).
//   - A fenced append never takes the loss of what this process wrote for
//     another writer: a subject whose last sequence went back (a purge, a
//     deleted stream) is ErrRemoved, the fence reads the subject again, and
//     the next append goes on from the log; only a subject moved forward
//     by another token is ErrFenced (TestPurgeIsNotAnotherWriter).
//   - Follow yields every matching event after the cursor once and in order,
//     history then live, through a single ordered consumer. It returns at
//     its ctx's end, even while that consumer recreates itself after its
//     server died, which the client library does holding the consumer's
//     lock (TestFollowCancelledWhileItsConsumerIsRecreated): the consumer
//     is stopped and deleted in the background.
//   - A Read or Follow leaves no consumer behind once it ends, even one
//     whose ctx ended while its consumer's create was in flight (the
//     server may still carry it out): each stream's consumers are capped
//     (TestReadsLeaveNoConsumers,
//     TestFollowCancelledWhileCreatingLeavesNoConsumer), and neither does
//     MoveToShards' copy, finished or failed (TestMoveToShards,
//     TestFailedMoveLeavesNoConsumer).
//   - SpreadLeaders asks no stream's leader to step down for a server that
//     any stream's leader sees offline or has not heard from lately: a
//     crashed server is never preferred (TestLiveReplicas).
//   - No wait for the server is unbounded: one that has no deadline of its
//     own ends after Config.AckTimeout. A lost acknowledgement of a publish
//     without an expected sequence is retried with the same message id,
//     so JetStream's dedup stores the event once. A purge, or the delete of
//     a message, whose answer the connection lost as it reconnected is
//     sent again then, not left to wait out that bound
//     (TestPurgeSurvivesReconnect).
//   - A scan that yields no error saw every row: read errors (ErrClosed
//     after Close, I/O errors) are yielded, never taken for the end.
//   - Projector.WaitFor and Follower.WaitFor never outlive Run: once Run
//     returned they return Run's error, or ErrStopped after a clean stop.
//   - Under an Owner, an append to an agent this process does not own, or
//     after another writer took the agent over, sends nothing and fails
//     with ErrNotOwner or ErrFenced; OwnerLost classifies both, and callers
//     (fiber, chat) then write nothing more for the agent, its error
//     paths included.
//   - Sharded, everything of one agent is in one shard: its events, its
//     chunks, its fences and its Seqs; an agent's Seqs grow as its stream
//     sequences do (TestShardsAppendRead, TestShardsFence).
//   - Sharded, a view is the fold of every shard's events: each shard's
//     events are applied once and in order from that shard's stored
//     cursor, committed with it; the shards' commits take turns, so a
//     view's rows are never written by two at once; a view dropped (a new
//     Version, a rebuild) is replayed by every shard (TestShardsViews,
//     TestShardsViewsUnderLoad).
//   - Sharded, WaitFor(seq) waits for the shard seq names; WaitFor(SeqEnds)
//     (LastSeq of the whole log) waits for each shard's last event.
//   - With OwnedViews (ownedviews.go), a view applies the events of the
//     partitions given to FollowPartition only, each partition's once and
//     in order from its own stored cursor; a partition newly followed
//     catches up from its cursor before WaitFor returns, one no longer
//     followed keeps its rows and resumes from its cursor when followed
//     again; a WaitFor of a partition not followed returns (TestOwnedViews),
//     and so does a wait for a partition released while it waited
//     (TestOwnedViewsWaitAcrossRelease). WaitPartition(p) waits for
//     partition p's events alone: another partition catching up, in
//     another shard, does not hold it (TestOwnedViewsWaitPartition).
//     A view switched between the two ways applies nothing twice
//     (TestOwnedViewsSwitch). A catch-up ends at the last event the
//     stream's leader holds, not where its consumer has none pending:
//     JetStream places the consumer on any replica, and one behind the
//     leader has none pending before the end
//     (TestOwnedViewsCatchUpFromReplicaBehind). So does a Read that goes on
//     through its consumer (TestReadFromReplicaBehind).
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
