package verify

import (
	"fmt"
	"strings"

	"github.com/forever-agents/forever/eventlog"
)

// Kind names the invariant a Violation breaks; doc.go lists each with its
// rule.
type Kind string

// Kinds of violations.
const (
	KindCorrupt               Kind = "corrupt"
	KindFiberStartedTwice     Kind = "fiber-started-twice"
	KindFiberUnknown          Kind = "fiber-unknown"
	KindFiberEndedTwice       Kind = "fiber-ended-twice"
	KindAfterEnd              Kind = "fiber-after-end"
	KindRecoveryAttempt       Kind = "recovery-attempt"
	KindOpCompletedTwice      Kind = "op-completed-twice"
	KindOpNotStarted          Kind = "op-not-started"
	KindTurnStartedTwice      Kind = "turn-started-twice"
	KindTurnNoFiber           Kind = "turn-no-fiber"
	KindTurnOutcomeTwice      Kind = "turn-outcome-twice"
	KindTurnOutcomeUnknown    Kind = "turn-outcome-unknown"
	KindTurnOverlap           Kind = "turn-overlap"
	KindTurnTwoFibers         Kind = "turn-two-fibers"
	KindMessageAppendedTwice  Kind = "message-appended-twice"
	KindUserMessageUnanswered Kind = "user-message-unanswered"
	KindMessageAnsweredTwice  Kind = "message-answered-twice"
	KindChunkOrder            Kind = "chunk-order"
	KindChunkCorrupt          Kind = "chunk-corrupt"
	KindStreamStart           Kind = "stream-start"
	KindAfterTerminal         Kind = "stream-after-terminal"
	KindStreamNoTerminal      Kind = "stream-no-terminal"
	KindAckMissing            Kind = "ack-missing"
	KindChildTurnTwice        Kind = "child-turn-twice"
	KindLinkEndedTwice        Kind = "link-ended-twice"
	KindLinkNotStarted        Kind = "link-not-started"
	KindLinkOpen              Kind = "link-open"
	KindLinkNoChildTurn       Kind = "link-no-child-turn"
	KindBlobMissing           Kind = "blob-missing"
	KindBlobMismatch          Kind = "blob-mismatch"
	KindSummaryTwice          Kind = "summary-twice"

	// KindTurnOrphaned is a Note, not a violation: a turn whose fiber
	// ended without the turn's outcome, which the agent's next turn must
	// end first.
	KindTurnOrphaned Kind = "turn-orphaned"
	// KindAckCompacted is a Note: an acknowledged write of an agent that
	// was compacted is not in the log, nor in the snapshot (a fiber that
	// ended, an event of the purged history); its effect is in the views
	// the snapshot holds, which the log alone cannot show.
	KindAckCompacted Kind = "ack-compacted"
	// KindAckDeleted is a Note: an acknowledged write of an agent that was
	// deleted (eventlog.Delete) afterwards is not in the log.
	KindAckDeleted Kind = "ack-deleted"
	// KindLinkChildDeleted is a Note: a parent's link names a child turn
	// whose agent was deleted since (its turn is gone from the log).
	KindLinkChildDeleted Kind = "link-child-deleted"
	// KindSuperseded is a Note: events of an agent stored before its
	// latest snapshot. Compaction purges them, but a purge that a crash
	// undid in part leaves some (seen with nats-server 2.15.2 under
	// SIGKILL); the snapshot supersedes them, as it does in the views, so
	// they are not checked.
	KindSuperseded Kind = "superseded"
)

// Violation is one broken invariant. Agent is always set; Fiber, Request
// (a turn's request id) and Stream when the rule is about one; Seq is the
// stream sequence of the event that showed it (of the events stream, or of
// the chunks stream for stream kinds), 0 when it was the end of the log.
type Violation struct {
	Kind    Kind
	Agent   string
	Fiber   string
	Request string
	Stream  string
	Seq     eventlog.Seq
	// Text says what is wrong, as a sentence.
	Text string
}

// String formats v on one line: kind, what it concerns, the sentence.
func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s agent=%s", v.Kind, v.Agent)
	if v.Fiber != "" {
		fmt.Fprintf(&b, " fiber=%s", v.Fiber)
	}
	if v.Request != "" {
		fmt.Fprintf(&b, " request=%s", v.Request)
	}
	if v.Stream != "" {
		fmt.Fprintf(&b, " stream=%s", v.Stream)
	}
	if v.Seq != 0 {
		fmt.Fprintf(&b, " seq=%d", v.Seq)
	}
	b.WriteString(": ")
	b.WriteString(v.Text)
	return b.String()
}

// Report is the result of Check. The caller owns it.
type Report struct {
	// What was read.
	Agents, Events, ChunkEvents   int
	Fibers, Turns, Streams, Acked int
	// UserMessages is how many stored user messages were read (appended,
	// or carried by their turn.started), each checked for one turn that
	// answers it: those after each agent's latest snapshot.
	UserMessages int
	// Blobs is how many payloads stored by reference were checked
	// (Options.Blobs).
	Blobs int
	// Violations are the broken invariants, in the order found.
	Violations []Violation
	// Notes are states the log allows but that are worth knowing
	// (KindTurnOrphaned).
	Notes []Violation
	// Reads is how many times Check read the log: more than once when
	// something was removed from it during a read (Check).
	Reads int
}

// OK reports whether no invariant is broken.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// Has reports whether a violation of kind k was found.
func (r Report) Has(k Kind) bool {
	for _, v := range r.Violations {
		if v.Kind == k {
			return true
		}
	}
	return false
}

// String formats the report: one line per violation and note, then a
// summary line of what was read: agents, events (of the events stream),
// chunk events (of the chunks stream), fibers and turns started, chat
// streams, user messages checked for their answer, and, when the caller
// gave its acknowledged writes (Check's acked), how many were found.
func (r Report) String() string {
	var b strings.Builder
	for _, v := range r.Violations {
		b.WriteString("violation: ")
		b.WriteString(v.String())
		b.WriteByte('\n')
	}
	for _, v := range r.Notes {
		b.WriteString("note: ")
		b.WriteString(v.String())
		b.WriteByte('\n')
	}
	verdict := "ok"
	if !r.OK() {
		verdict = fmt.Sprintf("%d violations", len(r.Violations))
	}
	fmt.Fprintf(&b, "%s: %d agents, %d events, %d chunk events, %d fibers, %d turns, %d streams, %d user messages",
		verdict, r.Agents, r.Events, r.ChunkEvents, r.Fibers, r.Turns, r.Streams, r.UserMessages)
	if r.Acked > 0 {
		// Only a caller that kept its acknowledged writes (the chaos
		// harness) has them checked.
		fmt.Fprintf(&b, ", %d acknowledged writes found", r.Acked)
	}
	if r.Blobs > 0 {
		fmt.Fprintf(&b, ", %d payloads stored by reference checked", r.Blobs)
	}
	if r.Reads > 1 {
		fmt.Fprintf(&b, " (read %d times: purges changed the log during the reads before)", r.Reads)
	}
	b.WriteByte('\n')
	return b.String()
}
