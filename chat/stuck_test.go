package chat_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/verify"
)

// hugeAnswer streams n bytes of text in 32 KiB deltas, then finishes, or,
// with block, signals reached and waits for ctx (a Cancel).
func hugeAnswer(n int, block bool, reached chan<- struct{}) script {
	return func(ctx context.Context, req llm.Request, yield func(llm.Delta, error) bool) {
		piece := strings.Repeat("x", 32<<10)
		for sent := 0; sent < n; sent += len(piece) {
			if !yield(llm.Delta{Kind: llm.TextDelta, Text: piece}, nil) {
				return
			}
		}
		if block {
			reached <- struct{}{}
			<-ctx.Done()
			yield(llm.Delta{}, context.Cause(ctx))
			return
		}
		yield(llm.Delta{Kind: llm.Finish, FinishReason: "stop", Usage: &llm.Usage{InputTokens: 1, OutputTokens: 1}}, nil)
	}
}

// An answer larger than the server's max payload is stored across several
// events (message.part) and read back whole: from the messages view, from
// views rebuilt from the log in a fresh Pebble, and after the agent was
// compacted and the views rebuilt again. The turn completes with one
// assistant message (verify agrees) and the agent takes the next turn. (A
// 2 MiB answer used to fail its turn and keep no message.)
//
// The server's max payload is 256 KiB here and the answer 768 KiB, three
// times it: what is tested is an answer several payloads long. At the
// default 1 MiB and a 2 MiB answer, the same test took 36 s under -race
// on a loaded 2-core machine (12 s at this size), every step of it
// (streaming, verify, compaction, rebuilds) in proportion to the bytes.
func TestHugeAnswerStoredWhole(t *testing.T) {
	// The compaction appends the answer's snapshot as one atomic batch,
	// which the server stages on disk: on a loaded machine a 2 MiB one
	// took longer than the default 5 s ack timeout, which this test does
	// not measure.
	const maxPayload = 256 << 10
	e := newEnvOn(t, eventlogtest.RunServer(t, eventlogtest.ServerOptions{MaxPayload: maxPayload}), eventlog.Config{AckTimeout: time.Minute})
	if got := e.lg.MaxPayload(); got != maxPayload {
		t.Fatalf("the server's max payload is %d, want %d", got, maxPayload)
	}
	const size = 3 * maxPayload
	p := &fake{scripts: []script{hugeAnswer(size, false, nil), passLocal()}}
	h := e.host(t, "a1", p, nil)
	turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: "say a lot"})
	if err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnCompleted {
		t.Fatalf("turn = %+v", tr)
	}
	cs, text := streamOf(t, e.lg, "a1", turn.StreamID)
	if last := cs[len(cs)-1]; last.Type != chunk.Finish || len(text) != size {
		t.Fatalf("stream ends with %+v after %d bytes of text", last, len(text))
	}
	check := func(what string, msgs []chat.Message) {
		t.Helper()
		if len(msgs) != 2 || msgs[1].ID != turn.MessageID || msgs[1].Text() != text {
			n := 0
			if len(msgs) == 2 {
				n = len(msgs[1].Text())
			}
			t.Fatalf("%s: %d messages, the answer %d bytes; want 2, the answer of %d bytes as streamed", what, len(msgs), n, size)
		}
	}
	check("messages view", settled(t, e, "a1"))
	if m, err := e.store.Message("a1", turn.MessageID); err != nil || m.Text() != text {
		t.Fatalf("Message(%s) = %d bytes, %v", turn.MessageID, len(m.Text()), err)
	}
	evs, err := e.lg.Read(t.Context(), eventlog.Filter{Agent: "a1"}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	parts := 0
	for _, ev := range evs {
		switch ev.Type {
		case chat.EventMessagePart:
			parts++
		case chat.EventMessageAppended:
			if strings.Contains(string(ev.Data), turn.MessageID) {
				t.Fatalf("the answer in one message.appended of %d bytes", len(ev.Data))
			}
		}
	}
	if parts < 3 {
		t.Fatalf("%d message.part events, want the answer in 3 or more", parts)
	}
	check("views rebuilt from the log", rebuiltMessages(t, e, "a1"))
	checkVerify(t, e.lg)

	// Compacted, the message is in the snapshot's rows, in pieces small
	// enough for its parts.
	if _, err := e.lg.Compact(t.Context(), "a1"); err != nil {
		t.Fatalf("compact: %v", err)
	}
	check("views rebuilt after compaction", rebuiltMessages(t, e, "a1"))

	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "hello"}); err != nil {
		t.Fatalf("send after the huge answer: %v", err)
	}
	h.r.Wait()
	msgs := settled(t, e, "a1")
	if len(msgs) != 4 || msgs[1].Text() != text || msgs[3].Text() != answer("hello") {
		t.Fatalf("messages = %d", len(msgs))
	}
	checkVerify(t, e.lg)
}

// An answer too large even for MaxMessageParts events cannot be stored:
// the turn ends with an error chunk saying so and turn.failed, nothing is
// half-written, and the agent takes the next turn (it used to stay
// "streaming" for good, every later chat refused with 409).
func TestHugeAnswerRefusedClearly(t *testing.T) {
	e := newEnv(t)
	p := &fake{scripts: []script{hugeAnswer(2<<20, false, nil), passLocal()}}
	// 16 KiB events: 64 parts hold under 1 MiB.
	h := e.host(t, "a1", p, func(c *chat.Config) { c.MaxPayload = 16 << 10 })
	turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: "say a lot"})
	if err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	tr := lastTurn(t, e, "a1")
	if tr.Status != chat.TurnFailed || !strings.Contains(tr.Error, "too large") {
		t.Fatalf("turn = %+v", tr)
	}
	cs, _ := streamOf(t, e.lg, "a1", turn.StreamID)
	if last := cs[len(cs)-1]; last.Type != chunk.Error || !strings.Contains(last.ErrorText, "too large") {
		t.Fatalf("stream ends with %+v", last)
	}
	if n := count(cs, chunk.Finish); n != 0 {
		t.Fatalf("stream has %d finish chunks and an error", n)
	}
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "hello"}); err != nil {
		t.Fatalf("send after the huge answer: %v", err)
	}
	h.r.Wait()
	msgs := settled(t, e, "a1")
	if len(msgs) != 3 || msgs[2].Text() != answer("hello") {
		t.Fatalf("messages = %+v", msgs)
	}
	checkVerify(t, e.lg)
}

// rebuiltMessages opens the chat views in a fresh Pebble over e's streams,
// as a process whose data dir was lost, and returns agent's messages once
// they caught up with the log.
func rebuiltMessages(t *testing.T, e *env, agent string) []chat.Message {
	t.Helper()
	lg := eventlogtest.OpenOn(t, e.srv, eventlog.Config{})
	store, prs, err := chat.OpenStore(lg)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range prs {
		eventlogtest.RunProjector(t, pr)
	}
	last, err := lg.LastSeq(t.Context(), eventlog.Filter{Agent: agent})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.WaitFor(t.Context(), last); err != nil {
		t.Fatal(err)
	}
	msgs, _, err := store.Messages(agent, chat.Page{})
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

func checkVerify(t *testing.T, lg *eventlog.Log) {
	t.Helper()
	rep, err := verify.Check(t.Context(), lg, verify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("verify:\n%s", rep)
	}
}

// A user message too large for one event is refused before anything is
// appended: ErrTooLarge (413 through agentd), no message without its turn.
func TestHugeUserMessageRefused(t *testing.T) {
	e := newEnv(t)
	h := e.host(t, "a1", &fake{scripts: []script{passLocal()}}, nil)
	_, err := h.a.Send(t.Context(), chat.SendRequest{Text: strings.Repeat("y", 2<<20)})
	if !errors.Is(err, chat.ErrTooLarge) || !errors.Is(err, eventlog.ErrTooLarge) {
		t.Fatalf("send: %v, want ErrTooLarge", err)
	}
	if msgs := settled(t, e, "a1"); len(msgs) != 0 {
		t.Fatalf("messages = %+v", msgs)
	}
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
}

// Any failure of a turn's fiber ends the turn: here a cancelled huge answer
// (its partial stored in parts) still gets an outcome, so the next Send is
// taken.
func TestFiberFailureEndsTurn(t *testing.T) {
	e := newEnv(t)
	reached := make(chan struct{}, 1)
	p := &fake{scripts: []script{hugeAnswer(2<<20, true, reached), passLocal()}}
	h := e.host(t, "a1", p, nil)
	turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: "say a lot"})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, reached)
	if _, err := h.a.Cancel(t.Context()); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	if tr := lastTurn(t, e, "a1"); tr.Active() {
		t.Fatalf("turn still active: %+v", tr)
	}
	if info := streamInfo(t, e, "a1", turn.StreamID); info.Done() != true {
		t.Fatalf("stream = %+v", info)
	}
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "hello"}); err != nil {
		t.Fatalf("send after the failed turn: %v", err)
	}
	h.r.Wait()
}

// A turn whose fiber ended without its outcome (the log refused every
// write then) is orphaned; the next Send ends it with an error chunk
// (after the start chunk its stream lacked) and turn.failed instead of
// answering 409 for ever.
func TestOrphanedTurnEndedBySend(t *testing.T) {
	e := newEnv(t)
	raw := func(typ string, v any) {
		ev, err := eventlog.NewEvent("a1", typ, v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.lg.Append(t.Context(), ev); err != nil {
			t.Fatal(err)
		}
	}
	raw(fiber.EventStarted, map[string]any{"id": "F1", "name": chat.TurnFiberPrefix + "R1"})
	raw(chat.EventTurnStarted, map[string]any{"requestId": "R1", "streamId": "S1", "messageId": "M1", "assistantMessageId": "A1"})
	h := e.host(t, "a1", &fake{scripts: []script{passLocal()}}, nil)
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "hi"}); !errors.Is(err, chat.ErrTurnActive) {
		t.Fatalf("send while the turn's fiber runs: %v, want ErrTurnActive", err)
	}
	raw(fiber.EventFailed, map[string]any{"id": "F1", "error": "chat: append turn.failed: disk full"})
	settled(t, e, "a1")
	if tr := lastTurn(t, e, "a1"); !tr.Orphaned || !strings.Contains(tr.FiberError, "disk full") {
		t.Fatalf("turn = %+v", tr)
	}
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "hi"}); err != nil {
		t.Fatalf("send after an orphaned turn: %v", err)
	}
	h.r.Wait()
	tr, err := e.store.Turn("a1", "R1")
	if err != nil || tr.Status != chat.TurnFailed || !strings.Contains(tr.Error, "disk full") {
		t.Fatalf("orphaned turn = %+v, %v", tr, err)
	}
	// The stream had no chunk: it gets its start before the error, as a
	// stream starts however it ends (verify's stream-start rule).
	cs, _ := streamOf(t, e.lg, "a1", "S1")
	if len(cs) != 2 || cs[0].Type != chunk.Start || cs[0].RequestID != "R1" || cs[1].Type != chunk.Error {
		t.Fatalf("orphaned stream = %+v", cs)
	}
}
