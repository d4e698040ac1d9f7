package verify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/verify"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// history writes hand-made events into a log.
type history struct {
	t  *testing.T
	lg *eventlog.Log
}

// ev appends an event of agent with data v (a map or a JSON string).
func (h history) ev(agent, typ string, v any) {
	h.t.Helper()
	data, ok := v.(string)
	if !ok {
		b, err := json.Marshal(v)
		if err != nil {
			h.t.Fatal(err)
		}
		data = string(b)
	}
	if _, err := h.lg.Append(h.t.Context(), eventlog.Event{Agent: agent, Type: typ, Data: json.RawMessage(data)}); err != nil {
		h.t.Fatalf("append %s: %v", typ, err)
	}
}

// chunk appends chunk index of stream as one event with the given JSON.
func (h history) chunk(agent, stream string, index int, body string) {
	h.t.Helper()
	e := eventlog.Event{Agent: agent, Stream: stream, Type: "chunk", ID: fmt.Sprintf("%s/%d", stream, index), Data: json.RawMessage(body)}
	if _, err := h.lg.Append(h.t.Context(), e); err != nil {
		h.t.Fatalf("append chunk %d: %v", index, err)
	}
}

// split appends chunk index of stream as two chunk.part events.
func (h history) split(agent, stream string, index int, body string) {
	h.t.Helper()
	half := len(body) / 2
	for k, seg := range []string{body[:half], body[half:]} {
		data, _ := json.Marshal(map[string]any{"i": index, "part": k, "parts": 2, "b": []byte(seg)})
		e := eventlog.Event{Agent: agent, Stream: stream, Type: "chunk.part", ID: fmt.Sprintf("%s/%d.%d", stream, index, k), Data: data}
		if _, err := h.lg.Append(h.t.Context(), e); err != nil {
			h.t.Fatalf("append part: %v", err)
		}
	}
}

// packed appends chunks index, index+1, ... of stream as one packed record
// (chunk.EventChunks).
func (h history) packed(agent, stream string, index int, bodies ...string) {
	h.t.Helper()
	data := fmt.Sprintf(`{"i":%d,"c":[%s]}`, index, strings.Join(bodies, ","))
	e := eventlog.Event{Agent: agent, Stream: stream, Type: "chunks", ID: fmt.Sprintf("%s/%d", stream, index), Data: json.RawMessage(data)}
	if _, err := h.lg.Append(h.t.Context(), e); err != nil {
		h.t.Fatalf("append packed chunks %d: %v", index, err)
	}
}

func (h history) typed(agent, stream string, index int, typ string) {
	h.t.Helper()
	h.chunk(agent, stream, index, `{"type":"`+typ+`"}`)
}

type m = map[string]any

// clean writes a history that keeps every invariant: a chat turn recovered
// twice (the count reset by a stash in between) with a split chunk, a
// completed op, its assistant message appended once and updated; a steps
// fiber abandoned; a turn whose stream retention purged; a turn still
// running.
func clean(h history) {
	// Turn r1 on a1, stream s1.
	h.ev("a1", "fiber.started", m{"id": "f1", "name": "__chat_turn:r1"})
	h.ev("a1", "message.appended", m{"id": "m1", "role": "user", "requestId": "r1"})
	h.ev("a1", "turn.started", m{"requestId": "r1", "streamId": "s1", "messageId": "m1", "assistantMessageId": "m2"})
	h.typed("a1", "s1", 0, "start")
	h.typed("a1", "s1", 1, "start-step")
	h.chunk("a1", "s1", 2, `{"type":"text-start","id":"t"}`)
	h.ev("a1", "fiber.stashed", m{"id": "f1", "snapshot": m{"chunkIndex": 3}, "attempts": 0})
	h.ev("a1", "fiber.recovered", m{"id": "f1", "attempt": 1})
	h.split("a1", "s1", 3, `{"type":"text-delta","id":"t","delta":"a long piece of text"}`)
	h.ev("a1", "fiber.stashed", m{"id": "f1", "snapshot": m{"chunkIndex": 4}, "attempts": 0})
	h.ev("a1", "fiber.recovered", m{"id": "f1", "attempt": 1})
	h.ev("a1", "fiber.recovered", m{"id": "f1", "attempt": 2})
	h.ev("a1", "op.started", m{"fiber": "f1", "opId": "o1", "key": "tool:c1"})
	h.ev("a1", "op.started", m{"fiber": "f1", "opId": "o1", "key": "tool:c1"}) // a rerun
	h.ev("a1", "op.completed", m{"fiber": "f1", "opId": "o1", "result": 1})
	h.chunk("a1", "s1", 4, `{"type":"text-end","id":"t"}`)
	h.packed("a1", "s1", 5, `{"type":"finish-step"}`, `{"type":"finish"}`)
	h.ev("a1", "message.appended", m{"id": "m2", "role": "assistant", "requestId": "r1"})
	h.ev("a1", "message.updated", m{"id": "m2", "parts": []m{}})
	h.ev("a1", "context.summarized", m{"upto": "m2", "text": "Summary of 2 messages.", "tokens": 6, "requestId": "r1"})
	h.ev("a1", "usage.recorded", m{"requestId": "r1", "input": 1, "output": 2})
	h.ev("a1", "turn.completed", m{"requestId": "r1", "finishReason": "stop"})
	h.ev("a1", "fiber.completed", m{"id": "f1"})

	// A steps fiber on another agent, abandoned after its attempts.
	h.ev("steps:b", "fiber.started", m{"id": "f2", "name": "steps"})
	h.ev("steps:b", "op.started", m{"fiber": "f2", "opId": "o2"})
	h.ev("steps:b", "fiber.recovered", m{"id": "f2", "attempt": 1})
	h.ev("steps:b", "fiber.recovered", m{"id": "f2", "attempt": 2})
	h.ev("steps:b", "fiber.abandoned", m{"id": "f2", "attempts": 2, "reason": "no snapshot"})
	// Chained steps on it: each op.completed starts the next op
	// (fiber.ThenStep). Recovered, it completes a step, which resets its
	// attempt count (attempts 0 with no snapshot: progress by default).
	h.ev("steps:b", "fiber.started", m{"id": "f6", "name": "steps", "opId": "o6", "key": "step-0"})
	h.ev("steps:b", "op.completed", m{"fiber": "f6", "opId": "o6", "result": 0, "nextOpId": "o7", "nextKey": "step-1"})
	h.ev("steps:b", "fiber.recovered", m{"id": "f6", "attempt": 1})
	h.ev("steps:b", "op.completed", m{"fiber": "f6", "opId": "o7", "result": 1, "attempts": 0})
	h.ev("steps:b", "fiber.recovered", m{"id": "f6", "attempt": 1})
	h.ev("steps:b", "fiber.completed", m{"id": "f6"})

	// Turn r2 on a1: its stream was purged by retention (only the
	// marker is left). Its user message is stored in its turn.started
	// alone (a Send killed before the message.appended that follows).
	h.ev("a1", "fiber.started", m{"id": "f3", "name": "__chat_turn:r2"})
	h.ev("a1", "turn.started", m{"requestId": "r2", "streamId": "s2", "messageId": "m5", "assistantMessageId": "m3",
		"message": m{"id": "m5", "role": "user", "requestId": "r2"}})
	h.ev("a1", "turn.interrupted", m{"requestId": "r2", "reason": "cancel"})
	h.ev("a1", "fiber.completed", m{"id": "f3"})
	if _, err := h.lg.Append(h.t.Context(), eventlog.Event{Agent: "a1", Stream: "s2", Type: "stream.expired", Data: json.RawMessage(`{}`)}); err != nil {
		h.t.Fatal(err)
	}

	// Turn r3 on a1, still streaming.
	h.ev("a1", "fiber.started", m{"id": "f4", "name": "__chat_turn:r3"})
	h.ev("a1", "turn.started", m{"requestId": "r3", "streamId": "s3", "assistantMessageId": "m4"})
	h.typed("a1", "s3", 0, "start")
	h.typed("a1", "s3", 1, "start-step")

	// Turn rp on p1 calls the sub-agent k1 (turn sub1), whose turn ends
	// and whose link ends; then turn rq on p1 waits for k1's turn sub2.
	h.ev("p1", "fiber.started", m{"id": "f7", "name": "__chat_turn:rp"})
	h.ev("p1", "turn.started", m{"requestId": "rp", "streamId": "sp", "assistantMessageId": "mp"})
	h.ev("k1", "fiber.started", m{"id": "f8", "name": "__chat_turn:sub1"})
	h.ev("k1", "turn.started", m{"requestId": "sub1", "streamId": "sk", "assistantMessageId": "mk",
		"parent": m{"agent": "p1", "requestId": "rp", "callId": "c1", "mode": "persistent", "chain": []string{"p1"}}})
	h.ev("p1", "subagent.started", m{"parentRequestId": "rp", "callId": "c1", "agent": "k1", "requestId": "sub1", "status": "running"})
	h.ev("k1", "turn.completed", m{"requestId": "sub1"})
	h.ev("p1", "subagent.ended", m{"parentRequestId": "rp", "callId": "c1", "agent": "k1", "requestId": "sub1", "status": "completed"})
	h.ev("p1", "turn.completed", m{"requestId": "rp"})
	h.ev("p1", "fiber.completed", m{"id": "f7"})
	h.ev("k1", "fiber.completed", m{"id": "f8"})
	h.ev("p1", "fiber.started", m{"id": "f11", "name": "__chat_turn:rq"})
	h.ev("p1", "turn.started", m{"requestId": "rq", "streamId": "sq", "assistantMessageId": "mq"})
	h.ev("k1", "fiber.started", m{"id": "f9", "name": "__chat_turn:sub2"})
	h.ev("k1", "turn.started", m{"requestId": "sub2", "streamId": "sk2", "assistantMessageId": "mk2",
		"parent": m{"agent": "p1", "requestId": "rq", "callId": "c3", "mode": "persistent", "chain": []string{"p1"}}})
	h.ev("p1", "subagent.started", m{"parentRequestId": "rq", "callId": "c3", "agent": "k1", "requestId": "sub2", "status": "running"})
}

// newLog opens a fresh log with its own streams on s.
func newLog(t *testing.T, s *server.Server, n int) *eventlog.Log {
	return eventlogtest.OpenOn(t, s, eventlog.Config{
		Prefix:       fmt.Sprintf("p%d", n),
		EventsStream: fmt.Sprintf("EVENTS_%d", n),
		ChunksStream: fmt.Sprintf("CHUNKS_%d", n),
	})
}

func check(t *testing.T, lg *eventlog.Log, opts verify.Options) verify.Report {
	t.Helper()
	rep, err := verify.Check(t.Context(), lg, opts)
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	return rep
}

func TestCleanHistory(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := newLog(t, s, 0)
	h := history{t, lg}
	clean(h)
	rep := check(t, lg, verify.Options{Acked: []verify.Ack{{Agent: "a1", ID: "r1"}, {Agent: "steps:b", ID: "f2"}}})
	if !rep.OK() || len(rep.Notes) != 0 {
		t.Fatalf("clean history:\n%s", rep)
	}
	if got, want := [...]int{rep.Agents, rep.Fibers, rep.Turns, rep.Streams, rep.Acked, rep.UserMessages}, [...]int{4, 9, 7, 3, 2, 2}; got != want {
		t.Errorf("agents, fibers, turns, streams, acked, user messages = %v, want %v", got, want)
	}
	// A small page size reads the same.
	if rep2 := check(t, lg, verify.Options{PageSize: 3}); rep2.Events != rep.Events || rep2.ChunkEvents != rep.ChunkEvents || !rep2.OK() {
		t.Errorf("paged read: %s, want %s", rep2, rep)
	}
}

func TestViolations(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	cases := []struct {
		name  string
		want  verify.Kind
		acked []verify.Ack
		// add writes the faulty events after the clean history.
		add func(h history)
	}{
		{"fiber started twice", verify.KindFiberStartedTwice, nil, func(h history) {
			h.ev("a1", "fiber.started", m{"id": "f4", "name": "__chat_turn:r3"})
		}},
		{"event of a fiber never started", verify.KindFiberUnknown, nil, func(h history) {
			h.ev("a1", "op.started", m{"fiber": "nope", "opId": "o9"})
		}},
		{"fiber ended twice", verify.KindFiberEndedTwice, nil, func(h history) {
			h.ev("a1", "fiber.failed", m{"id": "f1", "error": "late"})
		}},
		{"stash after the end", verify.KindAfterEnd, nil, func(h history) {
			h.ev("steps:b", "fiber.stashed", m{"id": "f2", "snapshot": m{}})
		}},
		{"recovery attempt skipped", verify.KindRecoveryAttempt, nil, func(h history) {
			h.ev("a1", "fiber.recovered", m{"id": "f4", "attempt": 2})
		}},
		{"recovery attempt repeated", verify.KindRecoveryAttempt, nil, func(h history) {
			h.ev("a1", "fiber.recovered", m{"id": "f4", "attempt": 1})
			h.ev("a1", "fiber.recovered", m{"id": "f4", "attempt": 1})
		}},
		{"op completed twice", verify.KindOpCompletedTwice, nil, func(h history) {
			h.ev("a1", "op.started", m{"fiber": "f4", "opId": "o5"})
			h.ev("a1", "op.completed", m{"fiber": "f4", "opId": "o5", "result": 1})
			h.ev("a1", "op.completed", m{"fiber": "f4", "opId": "o5", "result": 1})
		}},
		{"op completed without start", verify.KindOpNotStarted, nil, func(h history) {
			h.ev("a1", "op.completed", m{"fiber": "f4", "opId": "o6", "result": 1})
		}},
		{"turn started twice", verify.KindTurnStartedTwice, nil, func(h history) {
			h.ev("a1", "turn.started", m{"requestId": "r1", "streamId": "s9"})
		}},
		{"turn without its fiber", verify.KindTurnNoFiber, nil, func(h history) {
			h.ev("a2", "turn.started", m{"requestId": "r7", "streamId": "s7"})
		}},
		{"two outcomes", verify.KindTurnOutcomeTwice, nil, func(h history) {
			h.ev("a1", "turn.failed", m{"requestId": "r1", "error": "again"})
		}},
		{"outcome of no turn", verify.KindTurnOutcomeUnknown, nil, func(h history) {
			h.ev("a1", "turn.completed", m{"requestId": "r8"})
		}},
		{"two fibers of one turn", verify.KindTurnTwoFibers, nil, func(h history) {
			h.ev("a1", "fiber.started", m{"id": "f6", "name": "__chat_turn:r3"})
		}},
		{"turn while another runs", verify.KindTurnOverlap, nil, func(h history) {
			h.ev("a1", "fiber.started", m{"id": "f5", "name": "__chat_turn:r4"})
			h.ev("a1", "turn.started", m{"requestId": "r4", "streamId": "s4"})
		}},
		{"orphaned turn not ended before the next", verify.KindTurnOverlap, nil, func(h history) {
			h.ev("a1", "fiber.failed", m{"id": "f4", "error": "boom"})
			h.ev("a1", "fiber.started", m{"id": "f5", "name": "__chat_turn:r4"})
			h.ev("a1", "turn.started", m{"requestId": "r4", "streamId": "s4"})
		}},
		{"user message without its turn", verify.KindUserMessageUnanswered, nil, func(h history) {
			h.ev("a1", "fiber.started", m{"id": "f9", "name": "__chat_turn:r9"})
			h.ev("a1", "message.appended", m{"id": "m9", "role": "user", "requestId": "r9"})
			h.ev("a1", "fiber.completed", m{"id": "f9"})
		}},
		{"one command run twice", verify.KindMessageAnsweredTwice, nil, func(h history) {
			h.ev("a1", "fiber.started", m{"id": "f9", "name": "__chat_turn:r9"})
			h.ev("a1", "turn.started", m{"requestId": "r9", "streamId": "s9", "messageId": "m1", "fiberId": "f9"})
		}},
		{"turn ended, its stream not", verify.KindStreamNoTerminal, nil, func(h history) {
			h.ev("a1", "turn.failed", m{"requestId": "r3", "error": "not the agent's owner"})
		}},
		{"assistant message appended twice", verify.KindMessageAppendedTwice, nil, func(h history) {
			h.ev("a1", "message.appended", m{"id": "m2", "role": "assistant", "requestId": "r1"})
		}},
		{"assistant message appended again in parts", verify.KindMessageAppendedTwice, nil, func(h history) {
			h.ev("a1", "message.part", m{"id": "m2", "type": "message.appended", "part": 0, "parts": 2, "b": []byte(`{"id":"m2",`)})
			h.ev("a1", "message.part", m{"id": "m2", "type": "message.appended", "part": 1, "parts": 2, "b": []byte(`"role":"assistant"}`)})
		}},
		{"chunk gap", verify.KindChunkOrder, nil, func(h history) {
			h.typed("a1", "s3", 3, "text-start")
		}},
		{"chunk repeated", verify.KindChunkOrder, nil, func(h history) {
			// Written again after the dedup window: another message id.
			h.lg.Append(h.t.Context(), eventlog.Event{Agent: "a1", Stream: "s3", Type: "chunk", ID: "s3/01", Data: json.RawMessage(`{"type":"start-step"}`)})
		}},
		{"gap after a packed record", verify.KindChunkOrder, nil, func(h history) {
			h.packed("a1", "s3", 2, `{"type":"text-start","id":"t"}`, `{"type":"text-end","id":"t"}`)
			h.typed("a1", "s3", 5, "finish-step")
		}},
		{"packed chunk after the terminal one", verify.KindAfterTerminal, nil, func(h history) {
			h.packed("a1", "s1", 7, `{"type":"text-start","id":"t"}`)
		}},
		{"split chunk cut short", verify.KindChunkOrder, nil, func(h history) {
			data, _ := json.Marshal(m{"i": 2, "part": 0, "parts": 2, "b": []byte(`{"type":`)})
			h.lg.Append(h.t.Context(), eventlog.Event{Agent: "a1", Stream: "s3", Type: "chunk.part", ID: "s3/2.0", Data: data})
			h.typed("a1", "s3", 3, "finish-step")
		}},
		{"stream without start", verify.KindStreamStart, nil, func(h history) {
			h.typed("a1", "s8", 0, "text-start")
		}},
		{"second start", verify.KindStreamStart, nil, func(h history) {
			h.typed("a1", "s3", 2, "start")
		}},
		{"chunk after the terminal one", verify.KindAfterTerminal, nil, func(h history) {
			h.typed("a1", "s1", 7, "text-start")
		}},
		{"second terminal", verify.KindAfterTerminal, nil, func(h history) {
			h.typed("a1", "s1", 7, "error")
		}},
		{"chunk that does not decode", verify.KindChunkCorrupt, nil, func(h history) {
			h.chunk("a1", "s3", 2, `{"type":5}`)
		}},
		{"chunk id not an index", verify.KindChunkCorrupt, nil, func(h history) {
			h.lg.Append(h.t.Context(), eventlog.Event{Agent: "a1", Stream: "s3", Type: "chunk", ID: "elsewhere/2", Data: json.RawMessage(`{"type":"finish"}`)})
		}},
		{"a call's child turn started twice", verify.KindChildTurnTwice, nil, func(h history) {
			h.ev("k2", "fiber.started", m{"id": "f10", "name": "__chat_turn:sub9"})
			h.ev("k2", "turn.started", m{"requestId": "sub9", "streamId": "s10",
				"parent": m{"agent": "p1", "requestId": "rp", "callId": "c1", "mode": "ephemeral", "chain": []string{"p1"}}})
		}},
		{"summary made twice", verify.KindSummaryTwice, nil, func(h history) {
			h.ev("a1", "context.summarized", m{"upto": "m2", "text": "Summary of 2 messages.", "tokens": 6, "requestId": "r3"})
		}},
		{"link ended twice", verify.KindLinkEndedTwice, nil, func(h history) {
			h.ev("p1", "subagent.ended", m{"parentRequestId": "rp", "callId": "c1", "agent": "k1", "requestId": "sub1", "status": "cancelled"})
		}},
		{"link ended, never started", verify.KindLinkNotStarted, nil, func(h history) {
			h.ev("p1", "subagent.ended", m{"parentRequestId": "rp", "callId": "c7", "agent": "k1", "requestId": "sub7", "status": "completed"})
		}},
		{"turn ended with a link running", verify.KindLinkOpen, nil, func(h history) {
			h.ev("p1", "turn.interrupted", m{"requestId": "rq"})
		}},
		{"link to a turn not in the log", verify.KindLinkNoChildTurn, nil, func(h history) {
			h.ev("p1", "subagent.started", m{"parentRequestId": "rq", "callId": "c4", "agent": "k3", "requestId": "sub4", "status": "running"})
		}},
		{"acknowledged but missing", verify.KindAckMissing, []verify.Ack{{Agent: "a1", ID: "r1"}, {Agent: "a1", ID: "r-lost"}}, func(history) {}},
		{"ack of another agent's turn", verify.KindAckMissing, []verify.Ack{{Agent: "a2", ID: "r1"}}, func(history) {}},
		{"event that does not decode", verify.KindCorrupt, nil, func(h history) {
			js, err := jetstream.New(eventlogtest.Connect(h.t, s))
			if err != nil {
				h.t.Fatal(err)
			}
			if _, err := js.Publish(h.t.Context(), h.lg.EventsSubject("a1"), []byte("not an event")); err != nil {
				h.t.Fatal(err)
			}
			h.ev("a1", "fiber.failed", m{"id": "f1"}) // read past it: found too
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lg := newLog(t, s, i+1)
			h := history{t, lg}
			clean(h)
			tc.add(h)
			rep := check(t, lg, verify.Options{Acked: tc.acked})
			if !rep.Has(tc.want) {
				t.Fatalf("no %s violation:\n%s", tc.want, rep)
			}
			for _, v := range rep.Violations {
				if v.Agent == "" || v.Text == "" || !strings.Contains(rep.String(), v.Text) {
					t.Errorf("violation %+v lacks its agent or sentence", v)
				}
			}
			if tc.want == verify.KindCorrupt && !rep.Has(verify.KindFiberEndedTwice) {
				t.Errorf("the read stopped at the corrupt event:\n%s", rep)
			}
		})
	}
}

// TestOrphanedTurnIsANote: a turn whose fiber ended without an outcome is
// a state chat allows until the agent's next turn.
func TestOrphanedTurnIsANote(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := newLog(t, s, 0)
	h := history{t, lg}
	clean(h)
	h.ev("a1", "fiber.abandoned", m{"id": "f4", "attempts": 3, "reason": "exhausted"})
	rep := check(t, lg, verify.Options{})
	if !rep.OK() || len(rep.Notes) != 1 || rep.Notes[0].Kind != verify.KindTurnOrphaned || rep.Notes[0].Request != "r3" {
		t.Fatalf("want one orphaned-turn note and no violation:\n%s", rep)
	}
	// The next turn ends it first (an error chunk, then turn.failed):
	// clean again.
	h.typed("a1", "s3", 2, "error")
	h.ev("a1", "turn.failed", m{"requestId": "r3", "error": "abandoned"})
	h.ev("a1", "fiber.started", m{"id": "f5", "name": "__chat_turn:r4"})
	h.ev("a1", "turn.started", m{"requestId": "r4", "streamId": "s4"})
	if rep := check(t, lg, verify.Options{}); !rep.OK() || len(rep.Notes) != 0 {
		t.Fatalf("after the outcome:\n%s", rep)
	}
}

// TestCheckLive: Check reads up to what was stored when it began while
// appends go on.
func TestCheckLive(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := newLog(t, s, 0)
	h := history{t, lg}
	clean(h)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			id := fmt.Sprintf("g%d", i)
			for _, typ := range []string{"fiber.started", "fiber.completed"} {
				if _, err := lg.Append(ctx, eventlog.Event{Agent: "a3", Type: typ, Data: json.RawMessage(`{"id":"` + id + `","name":"n"}`)}); err != nil {
					return
				}
			}
		}
	}()
	for range 3 {
		if rep := check(t, lg, verify.Options{PageSize: 50}); !rep.OK() {
			t.Errorf("live check:\n%s", rep)
		}
	}
	cancel()
	<-done
}

func ExampleReport_String() {
	rep := verify.Report{Agents: 1, Events: 3, Violations: []verify.Violation{{
		Kind: verify.KindOpCompletedTwice, Agent: "a1", Fiber: "f1", Seq: 3,
		Text: `op o1 of fiber "steps" completed 2 times`,
	}}}
	fmt.Print(rep)
	// Output:
	// violation: op-completed-twice agent=a1 fiber=f1 seq=3: op o1 of fiber "steps" completed 2 times
	// 1 violations: 1 agents, 3 events, 0 chunk events, 0 fibers, 0 turns, 0 streams, 0 user messages
}

// TestMessageSentAgainAfterTruncation: truncating the conversation lets a
// message id be sent again; its second turn is not a command run twice.
func TestMessageSentAgainAfterTruncation(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := newLog(t, s, 0)
	h := history{t, lg}
	clean(h)
	h.typed("a1", "s3", 2, "error")
	h.ev("a1", "turn.failed", m{"requestId": "r3", "error": "cancelled"})
	h.ev("a1", "messages.truncated", m{"afterId": ""})
	h.ev("a1", "fiber.started", m{"id": "f7", "name": "__chat_turn:r7"})
	h.ev("a1", "turn.started", m{"requestId": "r7", "streamId": "s7", "messageId": "m1", "fiberId": "f7",
		"message": m{"id": "m1", "role": "user", "requestId": "r7"}})
	if rep := check(t, lg, verify.Options{}); !rep.OK() {
		t.Fatalf("a message sent again after a truncation:\n%s", rep)
	}
}
