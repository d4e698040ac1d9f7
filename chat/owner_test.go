package chat_test

import (
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/forever-agents/forever/verify"
)

// writtenBy returns what node wrote to agent's events and chunks after the
// given sequences.
func writtenBy(t *testing.T, lg *eventlog.Log, agent, node string, evAfter, chAfter eventlog.Seq) []eventlog.Event {
	t.Helper()
	var out []eventlog.Event
	for _, f := range []struct {
		filter eventlog.Filter
		after  eventlog.Seq
	}{{eventlog.Filter{Agent: agent}, evAfter}, {eventlog.Filter{Agent: agent, Chunks: true}, chAfter}} {
		evs, err := lg.Read(t.Context(), f.filter, f.after, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Writer.Node == node {
				out = append(out, e)
			}
		}
	}
	return out
}

// TestNotOwnerWritesNothing: a node whose write is refused because it no
// longer owns the agent (eventlog.ErrNotOwner, on a real fenced log) stops
// the agent's work there and writes nothing more: no error chunk, no
// assistant message, no outcome, no stash, no fiber end; also when its
// lease looks valid again at once (a renewal that landed late), which let
// the old owner record turn.failed before. The new owner's recovery then
// gives the turn exactly one outcome, and its stream exactly one terminal
// chunk. The write refused is a chunk (mid-turn) or a tool call's
// op.completed (mid-tool-call).
func TestNotOwnerWritesNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		prompt string
	}{
		{"mid-turn", "tell me a story"},
		{"mid-tool-call", "/tool slow {\"text\":\"x\"}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
			ownA, ownB := &eventlogtest.Owner{}, &eventlogtest.Owner{}
			ownA.Grant("a1", eventlog.Token{Node: "A", Epoch: 1})
			eA := newEnvOn(t, srv, eventlog.Config{Owner: ownA})
			eB := newEnvOn(t, srv, eventlog.Config{Owner: ownB})

			reached, resume := make(chan struct{}, 1), make(chan struct{})
			fx := newSideEffects()
			slow := fx.tool(t, "slow", chat.Idempotent)
			tools, err := chat.NewTools(slow)
			if err != nil {
				t.Fatal(err)
			}
			withTools := func(c *chat.Config) { c.Tools = tools }
			p := &fake{scripts: []script{passLocal()}}
			var before func() string
			if tc.name == "mid-turn" {
				var s script
				s, before = pauseAfterText(4, reached, resume)
				p = &fake{scripts: []script{s}}
			} else {
				// The tool blocks until resumed, then returns its result.
				fx.hold["slow"] = resume
				go func() { <-fx.reached; reached <- struct{}{} }()
			}
			hA := eA.host(t, "a1", p, withTools)
			turn, err := hA.a.Send(t.Context(), chat.SendRequest{Text: tc.prompt})
			if err != nil {
				t.Fatal(err)
			}
			wait(t, reached)
			if tc.name == "mid-turn" {
				// The deltas before the pause are queued (merged into fewer
				// chunks, maybe); let them land.
				waitfor.True(t, "the chunks before the pause to land", func() bool {
					_, text := streamOf(t, eA.lg, "a1", turn.StreamID)
					return text == before()
				})
			}
			evMark, err := eA.lg.LastSeq(t.Context(), eventlog.Filter{Agent: "a1"})
			if err != nil {
				t.Fatal(err)
			}
			chMark, err := eA.lg.LastSeq(t.Context(), eventlog.Filter{Agent: "a1", Chunks: true})
			if err != nil {
				t.Fatal(err)
			}
			// A's next write is refused; the ones after it would pass.
			ownA.Lapse("a1", 1)
			close(resume)
			hA.r.Wait()
			if evs := writtenBy(t, eA.lg, "a1", "A", evMark, chMark); len(evs) != 0 {
				t.Fatalf("node A wrote %d events after it was refused as not the owner, the first %s %s", len(evs), evs[0].Type, evs[0].Data)
			}

			// B takes the agent over and recovers the turn.
			ownA.Revoke("a1")
			ownB.Grant("a1", eventlog.Token{Node: "B", Epoch: 2})
			hB := eB.host(t, "a1", &fake{scripts: []script{passLocal()}}, withTools)
			if err := hB.r.Recover(t.Context()); err != nil {
				t.Fatal(err)
			}
			hB.r.Wait()
			turns := everyUserMessageAnswered(t, eB.lg, "a1")
			if tr := turns[turn.RequestID]; tr == nil || tr.outcome != chat.EventTurnCompleted || tr.terminal != chunk.Finish {
				t.Fatalf("turn = %+v, want completed once, its stream ended by finish", tr)
			}
			if evs := writtenBy(t, eB.lg, "a1", "A", evMark, chMark); len(evs) != 0 {
				t.Fatalf("node A wrote %s after it lost the agent", evs[0].Type)
			}
			if rep, err := verify.Check(t.Context(), eB.lg, verify.Options{}); err != nil || !rep.OK() {
				t.Fatalf("verify: %v\n%s", err, rep)
			}
		})
	}
}
