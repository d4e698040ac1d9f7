package eventlog_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/nats-io/nats.go"
)

// TestUnknownFate: an event append whose answer never comes before the
// caller's deadline (JetStream stored it; the answer was lost, as while a
// stream elects its leader) is ErrUnconfirmed, not a refusal; Settle then
// finds it stored, and stores nothing twice. An append whose context ended
// before it was sent is Unwritten. Under an Owner, as agentd runs.
func TestUnknownFate(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	var dropped atomic.Int32
	px := newLossyProxy(t, s, func(subject string, payload []byte) bool {
		if strings.HasPrefix(subject, "_INBOX.") && bytes.Contains(payload, []byte(`"stream":"FOREVER_EVENTS"`)) &&
			bytes.Contains(payload, []byte(`"seq"`)) {
			return dropped.CompareAndSwap(0, 1)
		}
		return false
	})
	nc, err := nats.Connect(px.url())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	owner := &grants{}
	owner.set("a1", eventlog.Token{Node: "n1", Epoch: 1})
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{Conn: nc, Owner: owner})

	e := eventlog.Event{Agent: "a1", Type: "turn.started", ID: "first", Data: []byte(`{}`)}
	// The deadline is only what ends the wait for an answer that never
	// comes; nothing here depends on how long it is.
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	_, err = lg.Append(ctx, e)
	cancel()
	if !eventlog.Unknown(err) || !errors.Is(err, context.DeadlineExceeded) || eventlog.Unwritten(err) {
		t.Fatalf("append whose answer was lost: %v; want ErrUnconfirmed wrapping the deadline, not Unwritten", err)
	}
	if dropped.Load() != 1 {
		t.Fatal("no answer was dropped")
	}
	seq, err := eventlog.Settle(t.Context(), lg, e)
	if err != nil || seq != 1 {
		t.Fatalf("Settle = %d, %v; want the first send's seq 1", seq, err)
	}
	// Never sent: a definite answer.
	done, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := lg.Append(done, eventlog.Event{Agent: "a1", Type: "note.added", Data: []byte(`{}`)}); !eventlog.Unwritten(err) || eventlog.Unknown(err) {
		t.Fatalf("append under a done context: %v; want Unwritten", err)
	}
	// Not sent before: Settle stores it, once.
	e2 := eventlog.Event{Agent: "a1", Type: "turn.started", ID: "second", Data: []byte(`{}`)}
	if seq, err := eventlog.Settle(t.Context(), lg, e2); err != nil || seq != 2 {
		t.Fatalf("Settle of an event never stored = %d, %v; want 2", seq, err)
	}
	if _, err := eventlog.Settle(t.Context(), lg, eventlog.Event{Agent: "a1", Type: "x"}); !errors.Is(err, eventlog.ErrInvalid) {
		t.Fatalf("Settle without an id: %v, want ErrInvalid", err)
	}
	evs, err := lg.Read(t.Context(), eventlog.Filter{Agent: "a1"}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, ev := range evs {
		ids = append(ids, ev.ID)
	}
	if got, want := strings.Join(ids, ","), "first,second"; got != want {
		t.Fatalf("stored %s, want %s", got, want)
	}
}

// TestChunkFenceReset: a chunk queued while its stream's fence was reset
// (after a send of unknown fate, or under a new lease) is not sent, and its
// error says so: Unwritten and Unavailable, so its writer is left to go on
// from what the stream holds, not abandoned. The stream's next chunk reads
// the stream again and is stored.
func TestChunkFenceReset(t *testing.T) {
	nodes := openNodes(t, 1)
	nd := nodes[0]
	nd.owner.set("x", eventlog.Token{Node: "n1", Epoch: 1})
	ctx := t.Context()
	b := nd.lg.NewBatcher(eventlog.BatcherConfig{})
	chunk := func(i int) eventlog.Event {
		return eventlog.Event{Agent: "x", Stream: "s1", Type: "chunk", Data: []byte(strconv.Itoa(i))}
	}
	p, err := b.Add(ctx, chunk(0))
	if err != nil {
		t.Fatal(err)
	}
	nd.lg.ForgetFences() // reset between the Add and the send
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })
	if _, err := p.Wait(ctx); !eventlog.Unwritten(err) || !eventlog.Unavailable(err) {
		t.Fatalf("chunk queued across a fence reset: %v; want Unwritten and Unavailable", err)
	}
	p, err = b.Add(ctx, chunk(1))
	if err != nil {
		t.Fatal(err)
	}
	if seq, err := p.Wait(ctx); err != nil || seq == 0 {
		t.Fatalf("next chunk: %d, %v", seq, err)
	}
}
