package chat

import (
	"errors"
	"testing"
	"time"
)

// TestDecideRecovery covers each case recoverTurn had before it was split
// into gather, decideRecovery and the turnRecovery executor, without NATS:
//
//	no turn.started                       -> no-turn (fiber ends)
//	turn not active (outcome recorded)    -> recorded
//	another fiber of the turn runs here   -> runs-here
//	stream's chunks expired               -> expired (fails)
//	stream ended (finish, error or abort) -> finalize
//	stored tools corrupt                  -> tools-corrupt (fails)
//	version policy fails the turn         -> version-fail (fails)
//	version policy restarts the answer    -> restart (step), not while waiting
//	attempts exhausted without progress   -> exhausted (fails)
//	  progress (new chunks) resets them; within AttemptWindow one attempt
//	attempt not yet stashed               -> stash (step); waiting: attempts 0
//	"turn" interrupt set                  -> interrupted (abort, persisted)
//	awaiting children / parked at budget  -> wait (resume, no attempt, no hook)
//	nothing reached clients               -> retry (resume iff a response id)
//	partial answer, hook not yet asked    -> ask (step)
//	hook error                            -> hook-failed (fails)
//	hook {Persist, Continue}              -> continue, persisted
//	hook {Continue}                       -> continue, not persisted
//	hook {Persist}                        -> abort, persisted ("persist")
//	hook {}                               -> abort, discarded ("discard")
//	hook {} with settled tool results     -> abort, persisted anyway
func TestDecideRecovery(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	active := TurnInfo{RequestID: "r1", StreamID: "s1", Status: TurnStreaming}
	text := []Part{{Type: PartText, Text: "partial"}}
	settled := []Part{{Type: PartTool, ToolCallID: "c1", State: ToolOutput}}
	oops := errors.New("oops")
	// base is an active turn whose stream is open with content, its
	// attempt stashed, and no hook asked yet.
	base := func() recoveryInput {
		return recoveryInput{
			found: true, info: active, chunks: 5, parts: text,
			snap:    snapshot{StreamID: "s1", RequestID: "r1", Attempts: 1, ChunksAtAttempt: 5, AttemptAt: now},
			stashed: true, now: now, max: 3,
		}
	}
	with := func(f func(*recoveryInput)) recoveryInput {
		in := base()
		f(&in)
		return in
	}
	cases := []struct {
		name    string
		in      recoveryInput
		want    recoveryKind
		metric  string
		resume  bool
		persist bool
		errIs   error
		check   func(t *testing.T, act recoveryAction)
	}{
		{name: "no turn.started", in: recoveryInput{}, want: recoverNoTurn},
		{name: "outcome recorded", in: recoveryInput{found: true, info: TurnInfo{RequestID: "r1", Status: TurnCompleted}}, want: recoverRecorded},
		{name: "runs in another fiber here", in: with(func(in *recoveryInput) { in.runsHere = true }), want: recoverRunsHere},
		{name: "chunks expired", in: with(func(in *recoveryInput) { in.expired = ErrChunksExpired }), want: recoverExpired, errIs: ErrChunksExpired},
		{name: "stream ended: finalize", in: with(func(in *recoveryInput) { in.terminal = "finish"; in.fail = oops }), want: recoverFinalize, metric: "finalize"},
		{name: "stream ended with error: finalize", in: with(func(in *recoveryInput) { in.terminal = "error" }), want: recoverFinalize, metric: "finalize"},
		{name: "tools corrupt", in: with(func(in *recoveryInput) { in.toolsErr = oops; in.fail = errors.New("version") }), want: recoverToolsCorrupt, errIs: oops},
		{name: "version policy fails", in: with(func(in *recoveryInput) { in.fail = oops; in.restart = true }), want: recoverVersionFail, metric: "version_fail", errIs: oops},
		{name: "version policy restarts", in: with(func(in *recoveryInput) { in.restart = true; in.stashed = false }), want: recoverRestart, metric: "version_restart"},
		{name: "restart waits while children run", in: with(func(in *recoveryInput) { in.restart = true; in.children = true }), want: recoverWait, metric: "children", resume: true},
		{
			name: "first attempt: stash", in: with(func(in *recoveryInput) {
				in.stashed, in.snap.Attempts, in.snap.AttemptAt = false, 0, time.Time{}
			}), want: recoverStash,
			check: func(t *testing.T, act recoveryAction) {
				if got, want := act.snap.Attempts, 1; got != want {
					t.Errorf("attempts = %d, want %d", got, want)
				}
				if got, want := act.snap.ChunkIndex, 5; got != want {
					t.Errorf("chunk index = %d, want %d", got, want)
				}
			},
		},
		{
			name: "attempts exhausted", in: with(func(in *recoveryInput) {
				in.stashed, in.snap.Attempts, in.snap.AttemptAt = false, 3, now.Add(-time.Hour)
			}), want: recoverExhausted, errIs: ErrRecoveryExhausted,
			check: func(t *testing.T, act recoveryAction) {
				if got, want := act.snap.Attempts, 4; got != want {
					t.Errorf("attempts = %d, want %d", got, want)
				}
			},
		},
		{
			name: "progress resets attempts", in: with(func(in *recoveryInput) {
				in.stashed, in.snap.Attempts, in.chunks = false, 3, 9
			}), want: recoverStash,
			check: func(t *testing.T, act recoveryAction) {
				if got, want := act.snap.Attempts, 1; got != want {
					t.Errorf("attempts = %d, want %d", got, want)
				}
			},
		},
		{
			name: "attempt within the window counts once", in: with(func(in *recoveryInput) {
				in.stashed, in.snap.Attempts, in.window = false, 3, time.Minute
				in.snap.AttemptAt = now.Add(-time.Second)
			}), want: recoverStash,
			check: func(t *testing.T, act recoveryAction) {
				if got, want := act.snap.Attempts, 3; got != want {
					t.Errorf("attempts = %d, want %d", got, want)
				}
			},
		},
		{
			name: "waiting counts no attempt", in: with(func(in *recoveryInput) {
				in.stashed, in.snap.Attempts, in.parked = false, 9, true
			}), want: recoverStash,
			check: func(t *testing.T, act recoveryAction) {
				if got, want := act.snap.Attempts, 0; got != want {
					t.Errorf("attempts = %d, want %d", got, want)
				}
			},
		},
		{name: "interrupted", in: with(func(in *recoveryInput) { in.interrupted = true; in.children = true }), want: recoverInterrupted, persist: true},
		{name: "awaiting children", in: with(func(in *recoveryInput) { in.children = true }), want: recoverWait, metric: "children", resume: true},
		{name: "parked at the budget", in: with(func(in *recoveryInput) { in.parked = true }), want: recoverWait, metric: "budget", resume: true},
		{name: "nothing streamed: retry", in: with(func(in *recoveryInput) { in.parts = nil }), want: recoverRetry, metric: "retry"},
		{name: "nothing streamed, response id: retry resuming", in: with(func(in *recoveryInput) { in.parts = nil; in.snap.ResponseID = "resp" }), want: recoverRetry, metric: "retry", resume: true},
		{name: "partial: ask the hook", in: base(), want: recoverAsk},
		{name: "hook failed", in: with(func(in *recoveryInput) { in.hook = &hookAnswer{err: oops} }), want: recoverHookFailed, errIs: oops},
		{name: "persist and continue", in: with(func(in *recoveryInput) { in.hook = &hookAnswer{dec: RecoveryDecision{Persist: true, Continue: true}} }), want: recoverContinue, metric: "continue", resume: true, persist: true},
		{name: "continue only", in: with(func(in *recoveryInput) { in.hook = &hookAnswer{dec: RecoveryDecision{Continue: true}} }), want: recoverContinue, metric: "continue", resume: true},
		{name: "persist only", in: with(func(in *recoveryInput) { in.hook = &hookAnswer{dec: RecoveryDecision{Persist: true}} }), want: recoverAbort, metric: "persist", persist: true},
		{name: "neither", in: with(func(in *recoveryInput) { in.hook = &hookAnswer{} }), want: recoverAbort, metric: "discard"},
		{name: "neither, settled tool results kept", in: with(func(in *recoveryInput) { in.parts = settled; in.hook = &hookAnswer{} }), want: recoverAbort, metric: "persist", persist: true},
	}
	seen := map[recoveryKind]bool{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			act := decideRecovery(c.in)
			seen[act.kind] = true
			if act.kind != c.want {
				t.Fatalf("kind = %s, want %s", act.kind, c.want)
			}
			if act.metric != c.metric {
				t.Errorf("metric = %q, want %q", act.metric, c.metric)
			}
			if act.resume != c.resume || act.persist != c.persist {
				t.Errorf("resume, persist = %v, %v, want %v, %v", act.resume, act.persist, c.resume, c.persist)
			}
			if c.errIs != nil && !errors.Is(act.err, c.errIs) {
				t.Errorf("err = %v, want %v", act.err, c.errIs)
			}
			if c.errIs == nil && act.err != nil {
				t.Errorf("err = %v, want none", act.err)
			}
			if c.check != nil {
				c.check(t, act)
			}
		})
	}
	for k := recoverNoTurn; k <= recoverContinue; k++ {
		if !seen[k] {
			t.Errorf("no case decides %s", k)
		}
	}
}

// TestDecideRecoverySteps walks a recovery through its steps as the
// executor does, each step's answer fed back: restart, stash, ask, and the
// hook's decision.
func TestDecideRecoverySteps(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	in := recoveryInput{
		found: true, info: TurnInfo{RequestID: "r1", StreamID: "s1", Status: TurnStreaming},
		chunks: 4, parts: []Part{{Type: PartText, Text: "old"}},
		snap:    snapshot{StreamID: "s1", RequestID: "r1", Attempts: 2, ChunksAtAttempt: 4, ResponseID: "old"},
		restart: true, now: now, max: 3,
	}
	var got []recoveryKind
	for range 10 {
		act := decideRecovery(in)
		got = append(got, act.kind)
		switch act.kind {
		case recoverRestart:
			// The restart drops the answer and the snapshot.
			in.restart, in.snap, in.chunks, in.parts = false, snapshot{StreamID: "s1", RequestID: "r1"}, 6, nil
			continue
		case recoverStash:
			in.snap, in.stashed = act.snap, true
			continue
		}
		if got, want := act.snap.Attempts, 1; got != want {
			t.Errorf("attempts = %d, want %d", got, want)
		}
		break
	}
	want := []recoveryKind{recoverRestart, recoverStash, recoverRetry}
	if len(got) != len(want) {
		t.Fatalf("steps = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("steps = %v, want %v", got, want)
		}
	}
}
