// Package verify checks an event log against the durability invariants of
// fibers, chat turns and chat streams, from the log alone: no projection, no
// process state. It is what the crash tests and the chaos command (go run
// ./chaos) run at their end, and what "agentd verify" runs on a data dir.
//
// # Model
//
// Check reads every event of the events stream (every agent's subject) and
// every chunk of the chunks stream, in stream order, up to the last
// sequence each held when Check began, so a live agentd can be checked: what
// it appends meanwhile is not read. On a live cluster a read JetStream
// cannot answer now (eventlog.Unavailable: a stream electing a leader, as
// after a node's restart) is tried again until Check's context ends. A live
// node also removes events while Check reads (a compaction appends a
// snapshot past the read's end and purges the history the read has not
// reached yet), so Check reads the whole log again while its removals
// changed during the read (eventlog.Log.Removals; ErrUnsettled after
// maxReads). It keeps a small state per fiber, turn
// and chat stream and reports each broken rule as a Violation naming the
// agent, and the fiber, turn (request id) or stream it concerns.
//
// A compacted agent's history starts with a snapshot (eventlog.Compact):
// Check takes it as the history it replaced (live fibers with their ops and
// recovery attempts, every turn with its outcome, every message appended)
// and checks the events after it against it. Check reads the log twice: a
// first pass finds each agent's latest snapshot, and the agent's events
// stored before it are superseded and not checked. Compaction purges them,
// but a crash stopping the purge, or undoing part of it (seen with
// nats-server 2.15.2 under SIGKILL), leaves some; that is a Note
// (KindSuperseded), as the views replace the agent's rows at the snapshot
// too. An acknowledged write that a
// compaction took away (an event of the purged history, a fiber that ended
// before it) is a Note (KindAckCompacted), not a violation: the log alone
// cannot show it.
//
// A deleted agent's history ends at its tombstone (eventlog.Delete, type
// eventlog.TypeDeleted): the events after it are a new agent with the same
// id, checked from nothing, and events a purge left before it are
// superseded as before a snapshot (KindSuperseded). Its chunks tombstone
// ends every chat stream of the agent before it, which is not checked. An
// acknowledged write of the deleted life is a Note (KindAckDeleted).
//
// # Invariants checked
//
// Fibers (package fiber's events):
//
//   - fiber.started is recorded once per fiber id, before any other event of
//     the fiber (fiber.stashed, fiber.recovered, op.*, its end)
//     [KindFiberStartedTwice, KindFiberUnknown].
//   - A fiber ends at most once (fiber.completed, fiber.failed or
//     fiber.abandoned), and nothing of it is appended after its end
//     [KindFiberEndedTwice, KindAfterEnd].
//   - Recovery attempts count up: each fiber.recovered has attempt n+1 where
//     n is the attempt of the fiber's previous fiber.recovered, or the count
//     a later fiber.stashed or op.completed reset it to (attempts: 0 when a
//     recovered fiber made progress, or a count the fiber keeps), 0 before
//     either. A crash
//     during recovery therefore shows as the next attempt, and a hook run
//     twice for one attempt shows as a repeated number [KindRecoveryAttempt].
//   - An op completes at most once per (fiber, opId), and only after its
//     op.started [KindOpCompletedTwice, KindOpNotStarted].
//
// Turns (package chat's events; a turn's fiber is "__chat_turn:<requestId>"):
//
//   - turn.started is recorded once per request id, after the turn's fiber
//     started [KindTurnStartedTwice, KindTurnNoFiber].
//   - A turn has one fiber at a time: a fiber of a turn's name starts only
//     once every earlier fiber of that name ended [KindTurnTwoFibers].
//   - A turn records at most one outcome (turn.completed, turn.failed or
//     turn.interrupted), never one for a turn that did not start
//     [KindTurnOutcomeTwice, KindTurnOutcomeUnknown].
//   - One turn per agent at a time: a turn starts only once every earlier
//     turn of the agent recorded its outcome [KindTurnOverlap]. So a turn
//     whose fiber ended without an outcome must get one before the agent's
//     next turn; until then it is reported as a Note (KindTurnOrphaned), not
//     a violation: chat documents that state (a crash between
//     fiber.abandoned and turn.failed, or an outcome that could not be
//     written) and that the next Send ends it.
//   - So every turn but an agent's last has exactly one outcome, and the
//     last has one once its fiber ended (or it is noted).
//   - A turn's assistant message is appended once (message.appended with the
//     turn's assistantMessageId at most once; message.updated after it as
//     often as needed). A message.appended too large for one event is
//     stored as message.part events; the last part of a set counts as the
//     append [KindMessageAppendedTwice].
//   - Every stored user message has a turn that answers it: a
//     message.appended with role user is named as the messageId of a
//     turn.started, before or after it (a turn.started that carries its
//     message in its message field stores both at once). A user message
//     without one is a question that will never be answered
//     [KindUserMessageUnanswered]. User messages held only by a snapshot
//     are not checked.
//   - A summary is made once: at most one context.summarized names a given
//     message as the end of what it covers (upto), since the agent's last
//     messages.truncated; a snapshot's context view counts as one
//     [KindSummaryTwice].
//   - A command runs once: no user message is answered by two turns (two
//     turn.started with its messageId, no messages.truncated of the agent
//     between them, which lets an id be sent again)
//     [KindMessageAnsweredTwice]. A turn.started that names its fiber
//     (fiberId) is checked against that fiber, not another of its name.
//   - A turn that recorded its outcome has a stream that ended: when its
//     stream holds chunks (and was not purged by retention), one of them is
//     terminal. An outcome recorded over a stream left streaming leaves its
//     clients waiting forever [KindStreamNoTerminal]. With the rule below
//     (at most one terminal chunk, nothing after it), such a stream has
//     exactly one terminal chunk, its last.
//
// Sub-agents (package chat's subagent.started and subagent.ended on the
// parent, and the parent a child's turn.started names):
//
//   - A call runs its child's turn at most once: at most one turn.started,
//     of any agent, names a given parent call (parent agent, request id and
//     call id) [KindChildTurnTwice].
//   - A link ends at most once, and only after it started
//     [KindLinkEndedTwice, KindLinkNotStarted].
//   - Every started link ends: a parent's turn that recorded its outcome
//     has no link still running [KindLinkOpen]. A turn still waiting for
//     its children is not checked.
//   - A started link names a child turn that is in the log (its
//     turn.started is durable before the link is appended), unless the
//     child was compacted [KindLinkNoChildTurn]; a child deleted since is
//     a Note [KindLinkChildDeleted].
//
// Chat streams (package chat/chunk's events on the chunks stream):
//
//   - Chunk indexes (ids "<stream>/<index>", a split chunk's parts
//     "<stream>/<index>.<part>" joined by chunk.Assembler, a packed
//     record "<stream>/<index of its first>" holding its chunks in order)
//     run 0, 1, 2, ... without gap or repeat [KindChunkOrder]; every
//     stored chunk decodes [KindChunkCorrupt].
//   - A stream starts with a start chunk, and has one [KindStreamStart].
//   - A stream has at most one terminal chunk (finish, error or abort) and
//     nothing after it [KindAfterTerminal].
//   - A stream holding a stream.expired marker was purged by retention: its
//     order and start are not checked.
//
// Across the log:
//
//   - Every stored event decodes [KindCorrupt].
//   - Everything the caller saw acknowledged (Options.Acked: an event id, a
//     turn's request id or a fiber id, per agent) is in the log
//     [KindAckMissing].
//   - With Options.Blobs, every payload an event or a chunk holds by
//     reference ({"digest":"sha256:<hex>","size":N}, package blob; a
//     chunk's chunk.Blobs) is in the blob
//     store [KindBlobMissing] and its bytes match the digest and size
//     [KindBlobMismatch]. References inside a compaction snapshot's rows
//     are not read.
//
// # Usage
//
//	lg, err := eventlog.Open(ctx, eventlog.Config{Conn: nc, Bind: true})
//	rep, err := verify.Check(ctx, lg, verify.Options{
//		Acked: []verify.Ack{{Agent: "a1", ID: reply.RequestID}},
//	})
//	if err != nil { /* the log could not be read */ }
//	if !rep.OK() {
//		fmt.Print(rep)
//	}
package verify
