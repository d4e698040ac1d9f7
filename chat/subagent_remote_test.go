package chat_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/forever-agents/forever/chat"
)

// remoteReader is a mesh whose parents read their children's turns as
// agentd's nodes with owned views do (chat.ChildTurnReader, the child's
// owner answering with its Agent.TurnOutcome); its first fails reads fail
// as a node's would while the child's partition moves (a 503).
type remoteReader struct {
	*mesh
	fails atomic.Int32
	reads atomic.Int32
}

func (r *remoteReader) ChildTurn(ctx context.Context, child, requestID string) (chat.TurnOutcome, bool, error) {
	r.reads.Add(1)
	if r.fails.Add(-1) >= 0 {
		return chat.TurnOutcome{}, true, errors.New("503: the agent's partition is moving")
	}
	out, err := r.get(child).a.TurnOutcome(ctx, requestID)
	return out, true, err
}

// TestSubagentOwnerReadFails: a parent whose reads of its child's turn on
// the child's owner fail for a while (the owner unreachable, or its
// partition moving) still gets the child's answer: a failed read is no
// answer about the child, and is tried again (sooner than a poll, which
// is an hour here), not the end of the parent's turn.
func TestSubagentOwnerReadFails(t *testing.T) {
	e := newEnv(t)
	m := newMesh(t, e, local)
	r := &remoteReader{mesh: m}
	r.fails.Store(3)
	m.opt = func(c *chat.Config) { c.Peers = r }
	parent := m.get("boss")
	if _, err := parent.a.Send(t.Context(), chat.SendRequest{Text: "/agent kid hello"}); err != nil {
		t.Fatal(err)
	}
	tr := awaitTurn(t, e, "boss")
	if tr.Status != chat.TurnCompleted {
		t.Fatalf("parent turn %s: %s, want completed", tr.Status, tr.Error)
	}
	msgs := settled(t, e, "boss")
	if len(msgs) != 2 {
		t.Fatalf("parent history has %d messages, want the question and one answer", len(msgs))
	}
	outs := childOutputs(t, msgs[1])
	if len(outs) != 1 || outs[0].Agent != "kid" || outs[0].Status != chat.LinkCompleted || outs[0].Text == "" {
		t.Fatalf("child outputs %+v, want kid's answer", outs)
	}
	if n := r.reads.Load(); n < 4 {
		t.Fatalf("%d reads of the child's turn, want the 3 that failed and one more", n)
	}
}
