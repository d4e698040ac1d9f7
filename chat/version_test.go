package chat_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/verify"
)

// A rolling upgrade: a turn started by version 1 is cut mid-answer (its
// process stops) and recovered by version 2, under each version policy.
// continue completes the answer from where it stopped; restart answers
// again from the user's message after a data-restart chunk, with one
// outcome; fail ends the stream with an error chunk and turn.failed
// naming both versions. verify finds the log clean each time.
func TestRollingUpgradeTurn(t *testing.T) {
	const prompt = "tell me a story"
	for _, policy := range []fiber.VersionPolicy{fiber.VersionContinue, fiber.VersionRestart, fiber.VersionFail} {
		t.Run(string(policy), func(t *testing.T) {
			e := newEnv(t)
			e.version = "1"
			turn := crash(t, e, "a1", prompt, 5)
			_, partial := streamOf(t, e.lg, "a1", turn.StreamID)
			if partial == "" {
				t.Fatal("nothing streamed before the stop")
			}
			if tr := lastTurn(t, e, "a1"); tr.Version != "1" {
				t.Fatalf("turn.started records version %q", tr.Version)
			}
			if rows := runs(t, e, "a1"); len(rows) != 1 || rows[0].Version != "1" {
				t.Fatalf("runs: %+v", rows)
			}

			e.version, e.policy = "2", policy
			p := &fake{scripts: []script{passLocal()}}
			recoverHost(t, e, "a1", p, nil)

			msgs := settled(t, e, "a1")
			cs, text := streamOf(t, e.lg, "a1", turn.StreamID)
			tr := lastTurn(t, e, "a1")
			switch policy {
			case fiber.VersionContinue:
				if tr.Status != chat.TurnCompleted || text != answer(prompt) || len(msgs) != 2 || msgs[1].Text() != answer(prompt) {
					t.Fatalf("continue: turn %s, stream %q, messages %+v", tr.Status, text, msgs)
				}
				if c := p.reqs[0].Continue; c == nil || c.PartialText != partial {
					t.Fatalf("continue: continuation %+v", c)
				}
			case fiber.VersionRestart:
				if tr.Status != chat.TurnCompleted || len(msgs) != 2 || msgs[1].Text() != answer(prompt) || msgs[1].ID != turn.MessageID {
					t.Fatalf("restart: turn %s, messages %+v", tr.Status, msgs)
				}
				if p.reqs[0].Continue != nil {
					t.Fatal("restart: the provider was asked to continue the old answer")
				}
				if n := count(cs, chunk.Restart); n != 1 || text != partial+answer(prompt) {
					t.Fatalf("restart: %d restart chunks, stream %q", n, text)
				}
				var data map[string]string
				for _, c := range cs {
					if c.Type == chunk.Restart {
						_ = json.Unmarshal(c.Data, &data)
					}
				}
				if data["from"] != "1" || data["to"] != "2" {
					t.Fatalf("restart chunk data %v", data)
				}
			case fiber.VersionFail:
				if p.Calls() != 0 {
					t.Fatal("fail: the provider was called")
				}
				last := cs[len(cs)-1]
				if tr.Status != chat.TurnFailed || last.Type != chunk.Error || last.ErrorText != tr.Error {
					t.Fatalf("fail: turn %+v, last chunk %+v", tr, last)
				}
				for _, want := range []string{`version "1"`, `version "2"`, "policy is fail"} {
					if !strings.Contains(tr.Error, want) {
						t.Errorf("fail: reason %q does not say %s", tr.Error, want)
					}
				}
				if info := streamInfo(t, e, "a1", turn.StreamID); info.Status != chunk.StatusError {
					t.Fatalf("fail: stream %+v", info)
				}
			}
			if n := count(cs, chunk.Finish) + count(cs, chunk.Error) + count(cs, chunk.Abort); n != 1 {
				t.Fatalf("%d terminal chunks", n)
			}
			ended := 0
			evs, err := e.lg.Read(t.Context(), eventlog.Filter{Agent: "a1"}, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs {
				switch ev.Type {
				case chat.EventTurnCompleted, chat.EventTurnFailed, chat.EventTurnInterrupted:
					ended++
				}
			}
			if ended != 1 {
				t.Fatalf("%d turn outcomes", ended)
			}
			if rows := runs(t, e, "a1"); len(rows) != 0 {
				t.Fatalf("runs after recovery: %+v", rows)
			}
			if rep, err := verify.Check(t.Context(), e.lg, verify.Options{}); err != nil || !rep.OK() {
				t.Fatalf("verify: %v %+v", err, rep)
			}
			// A later chat works under the new version.
			h := e.host(t, "a1", &fake{scripts: []script{passLocal()}}, nil)
			next, err := h.a.Send(t.Context(), chat.SendRequest{Text: "again"})
			if err != nil {
				t.Fatal(err)
			}
			h.r.Wait()
			if tr := lastTurn(t, e, "a1"); tr.RequestID != next.RequestID || tr.Status != chat.TurnCompleted || tr.Version != "2" {
				t.Fatalf("next turn %+v", tr)
			}
		})
	}
}

// A crash after the restart chunk restarts nothing twice: the next
// recovery finds the stream without content and answers once.
func TestRollingUpgradeRestartCrash(t *testing.T) {
	const prompt = "tell me a story"
	e := newEnv(t)
	e.version = "1"
	turn := crash(t, e, "a1", prompt, 5)
	e.version, e.policy = "2", fiber.VersionRestart
	reached := make(chan struct{}, 1)
	h := e.host(t, "a1", &fake{scripts: []script{cutAfter(0, reached)}}, nil)
	go func() { _ = h.r.Recover(t.Context()) }()
	wait(t, reached)
	h.r.Close()
	recoverHost(t, e, "a1", &fake{scripts: []script{passLocal()}}, nil)
	cs, _ := streamOf(t, e.lg, "a1", turn.StreamID)
	msgs := settled(t, e, "a1")
	if count(cs, chunk.Restart) != 1 || len(msgs) != 2 || msgs[1].Text() != answer(prompt) || lastTurn(t, e, "a1").Status != chat.TurnCompleted {
		t.Fatalf("%d restart chunks, messages %+v", count(cs, chunk.Restart), msgs)
	}
	if rep, err := verify.Check(t.Context(), e.lg, verify.Options{}); err != nil || !rep.OK() {
		t.Fatalf("verify: %v %+v", err, rep)
	}
}

func TestVersionErrorIs(t *testing.T) {
	err := &chat.VersionError{RequestID: "r", From: "1", To: "2", Err: &fiber.VersionError{From: "1", To: "2", Policy: fiber.VersionFail}}
	if !errors.Is(err, fiber.ErrVersionChanged) {
		t.Fatal("chat.VersionError is not fiber.ErrVersionChanged")
	}
}

// A queued message keeps its fiber whatever the type's policy: no
// version has started answering it, and its snapshot is the message.
func TestQueueFibersAlwaysContinue(t *testing.T) {
	e := newEnv(t)
	h := e.host(t, "a1", &fake{scripts: []script{passLocal()}}, nil)
	if p := h.a.FiberVersionPolicy(chat.QueueFiberPrefix + "r1"); p != fiber.VersionContinue {
		t.Fatalf("queue fiber policy %q", p)
	}
	if p := h.a.FiberVersionPolicy(chat.TurnFiberPrefix + "r1"); p != "" {
		t.Fatalf("turn fiber policy %q, want the type's", p)
	}
}
