package chat

import (
	"fmt"
	"time"
)

// recoveryKind is what recovery does with a turn whose fiber it resumed.
// decideRecovery picks it from recoveryInput alone; the turnRecovery
// executor (recovery_run.go) carries it out. Three kinds are steps that
// learn something and ask again (recoverRestart, recoverStash, recoverAsk);
// the others end the recovery, each in one way.
type recoveryKind uint8

const (
	// recoverNoTurn: the process died before turn.started was stored
	// (Send was not acknowledged); the fiber ends, nothing to release.
	recoverNoTurn recoveryKind = iota + 1
	// recoverRecorded: the turn's outcome is recorded (died before
	// fiber.completed); only its span is ended.
	recoverRecorded
	// recoverRunsHere: another fiber of this process runs the turn (this
	// one's fiber.started landed after its command gave up); the fiber
	// ends without touching the turn.
	recoverRunsHere
	// recoverExpired: the stream's chunks expired; the turn fails
	// (failExpired), its message left as it is.
	recoverExpired
	// recoverFinalize: the stream ended; only the records after its
	// terminal chunk (finish, error or abort) may be missing.
	recoverFinalize
	// recoverToolsCorrupt: the stored tools do not decode; the turn fails
	// as a running one would.
	recoverToolsCorrupt
	// recoverVersionFail: the agent type's version policy fails the turn.
	recoverVersionFail
	// recoverRestart (a step): the restart version policy starts the
	// answer again; the snapshot starts afresh, and the stream is read
	// again.
	recoverRestart
	// recoverExhausted: the turn was recovered more than
	// MaxRecoveryAttempts times without progress; it fails.
	recoverExhausted
	// recoverStash (a step): the attempt is made durable (the snapshot
	// stashed) before anything else happens, so a crash during it counts;
	// then the "turn" interrupt flag is read.
	recoverStash
	// recoverInterrupted: the "turn" interrupt is set; the turn aborts,
	// its partial answer stored.
	recoverInterrupted
	// recoverWait: the turn waited by design (for its children, or at its
	// soft budget limit); its wait goes on, no attempt counted and no
	// OnChatRecovery asked.
	recoverWait
	// recoverRetry: nothing reached clients; the turn runs again into the
	// same stream (resuming the provider's response when it has its id).
	recoverRetry
	// recoverAsk (a step): clients saw a partial answer; OnChatRecovery
	// decides.
	recoverAsk
	// recoverHookFailed: OnChatRecovery returned an error; the turn fails.
	recoverHookFailed
	// recoverAbort: the hook said not to continue; the stream ends with
	// abort, the partial answer stored if persist.
	recoverAbort
	// recoverContinue: the hook said to continue; the partial is stored
	// first if persist, and the answer goes on in the same stream.
	recoverContinue
)

var recoveryKindNames = [...]string{
	recoverNoTurn: "no-turn", recoverRecorded: "recorded", recoverRunsHere: "runs-here",
	recoverExpired: "expired", recoverFinalize: "finalize", recoverToolsCorrupt: "tools-corrupt",
	recoverVersionFail: "version-fail", recoverRestart: "restart", recoverExhausted: "exhausted",
	recoverStash: "stash", recoverInterrupted: "interrupted", recoverWait: "wait",
	recoverRetry: "retry", recoverAsk: "ask", recoverHookFailed: "hook-failed",
	recoverAbort: "abort", recoverContinue: "continue",
}

func (k recoveryKind) String() string {
	if int(k) < len(recoveryKindNames) && recoveryKindNames[k] != "" {
		return recoveryKindNames[k]
	}
	return fmt.Sprintf("recoveryKind(%d)", k)
}

// recoveryInput is what recovery knows of a turn when it decides: the
// turn, its stream, its snapshot, what the steps taken so far learned, and
// the clock and limits. It holds no handle: deciding does no I/O.
type recoveryInput struct {
	found    bool     // turn.started is stored
	info     TurnInfo // the turn, when found
	runsHere bool     // the slot is held by another fiber of this turn
	expired  error    // the stream's chunks expired (ErrChunksExpired)

	// What the stream shows.
	terminal string // its terminal chunk's type, "" while open
	chunks   int    // stored chunks
	parts    []Part // the streamed answer clients saw

	snap     snapshot // the fiber's snapshot (with the attempt, once stashed)
	toolsErr error    // the stored tools do not decode
	fail     error    // the version policy fails the turn
	restart  bool     // the version policy restarts the answer, not done yet
	parked   bool     // parked at the soft budget limit
	children bool     // awaiting a child turn

	stashed     bool        // the attempt is stashed (recoverStash done)
	interrupted bool        // the "turn" interrupt, as read after the stash
	hook        *hookAnswer // OnChatRecovery's answer (recoverAsk done)

	now    time.Time
	max    int           // Config.MaxRecoveryAttempts
	window time.Duration // Config.AttemptWindow
}

// hookAnswer is what Config.OnChatRecovery answered.
type hookAnswer struct {
	dec RecoveryDecision
	err error
}

// recoveryAction is decideRecovery's answer.
type recoveryAction struct {
	kind recoveryKind
	// metric is the forever_chat_recoveries_total outcome it counts, ""
	// for none.
	metric string
	// snap is the turn's snapshot from here on (the attempt counted).
	snap snapshot
	// err is why the turn fails (recoverToolsCorrupt, recoverVersionFail,
	// recoverExhausted, recoverHookFailed, recoverExpired).
	err error
	// resume: the run continues the answer after what the stream holds
	// (recoverWait, recoverRetry, recoverContinue).
	resume bool
	// persist: the partial answer is stored (recoverAbort,
	// recoverContinue).
	persist bool
}

// decideRecovery is what to do next with a recovered turn, from in alone.
// The order of the cases is the order of precedence: an ended stream is
// finalized whatever the policies say; a failing version policy wins over
// a restart; a turn that waits by design counts no attempt; the attempt is
// stashed before the interrupt is read, so a crash from there on counts.
func decideRecovery(in recoveryInput) recoveryAction {
	act := recoveryAction{snap: in.snap}
	set := func(k recoveryKind, metric string) recoveryAction {
		act.kind, act.metric = k, metric
		return act
	}
	switch {
	case !in.found:
		return set(recoverNoTurn, "")
	case !in.info.Active():
		return set(recoverRecorded, "")
	case in.runsHere:
		return set(recoverRunsHere, "")
	case in.expired != nil:
		act.err = in.expired
		return set(recoverExpired, "")
	case in.terminal != "":
		return set(recoverFinalize, "finalize")
	case in.toolsErr != nil:
		act.err = in.toolsErr
		return set(recoverToolsCorrupt, "")
	case in.fail != nil:
		act.err = in.fail
		return set(recoverVersionFail, "version_fail")
	}
	waiting := in.parked || in.children
	if in.restart && !waiting {
		// A waiting turn's wait goes on: its children run.
		return set(recoverRestart, "version_restart")
	}
	if !in.stashed {
		if waiting {
			act.snap.Attempts = 0
		} else if act.snap.countAttempt(in.chunks, in.max, in.now, in.window) {
			act.err = fmt.Errorf("%w: turn %s was recovered %d times without progress", ErrRecoveryExhausted, in.info.RequestID, in.max)
			return set(recoverExhausted, "")
		}
		act.snap.ChunkIndex = in.chunks
		return set(recoverStash, "")
	}
	switch {
	case in.interrupted:
		act.persist = true
		return set(recoverInterrupted, "")
	case in.parked:
		act.resume = true
		return set(recoverWait, "budget")
	case in.children:
		act.resume = true
		return set(recoverWait, "children")
	case !hasContent(in.parts):
		act.resume = in.snap.ResponseID != ""
		return set(recoverRetry, "retry")
	case in.hook == nil:
		return set(recoverAsk, "")
	case in.hook.err != nil:
		act.err = fmt.Errorf("chat: recovery hook: %w", in.hook.err)
		return set(recoverHookFailed, "")
	}
	act.persist = persistPartial(in.hook.dec, in.parts)
	if !in.hook.dec.Continue {
		if act.persist {
			return set(recoverAbort, "persist")
		}
		return set(recoverAbort, "discard")
	}
	act.resume = true
	return set(recoverContinue, "continue")
}
