package chat_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/waitfor"
)

// A turn recovered after the chunks stream's safety cap
// (eventlog.Config.ChunkSafetyAge) removed its stream gets a clear
// answer: an error chunk and turn.failed naming the expiry; it is neither
// continued from a truncated partial nor left waiting, and the provider is
// not called.
func TestRecoverAfterChunksExpired(t *testing.T) {
	e := newEnvWith(t, eventlog.Config{ChunkSafetyAge: time.Second})
	turn := crash(t, e, "a1", "tell me a story", 3)
	streamInfo(t, e, "a1", turn.StreamID) // the view saw the chunks
	waitfor.True(t, "the chunks to expire", func() bool {
		// Each read is bounded: one whose events expire under it waits
		// for them past its end (eventlog's read follows up to the last
		// sequence it saw).
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		evs, err := e.lg.Read(ctx, eventlog.Filter{Agent: "a1", Stream: turn.StreamID}, 0, 0)
		return err == nil && len(evs) == 0
	})
	p := &fake{scripts: []script{failWith(errNotCalled)}}
	h := recoverHost(t, e, "a1", p, nil)
	if p.Calls() != 0 {
		t.Fatal("provider called for an expired stream")
	}
	tr := lastTurn(t, e, "a1")
	if tr.Status != chat.TurnFailed || !strings.Contains(tr.Error, "expired") {
		t.Fatalf("turn = %+v", tr)
	}
	cs := readChunks(t, e.lg, "a1", turn.StreamID)
	if len(cs) != 1 || cs[0].Type != chunk.Error || !strings.Contains(cs[0].ErrorText, "expired") {
		t.Fatalf("stream = %+v", cs)
	}
	if msgs := settled(t, e, "a1"); len(msgs) != 1 {
		t.Fatalf("messages = %+v, want only the user's", msgs)
	}
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: "again"}); errors.Is(err, chat.ErrTurnActive) || err != nil {
		t.Fatalf("send: %v", err)
	}
	h.r.Wait()
}
