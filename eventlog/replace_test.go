package eventlog_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestBatcherReplace: Replace changes an event still in the Batcher's
// queue, and nothing once the event was taken into a batch; bad data is
// refused and changes nothing.
func TestBatcherReplace(t *testing.T) {
	lg := eventlogtest.OpenOn(t, eventlogtest.RunServer(t, eventlogtest.ServerOptions{}), eventlog.Config{})
	ctx := t.Context()
	b := lg.NewBatcher(eventlog.BatcherConfig{})
	p, err := b.Add(ctx, eventlog.Event{Agent: "a", Stream: "s", Type: "chunk", ID: "s/0", Data: []byte(`{"v":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := b.Replace(p, []byte(`{"v":2}`)); !ok || err != nil {
		t.Fatalf("Replace of a queued event: %v, %v; want true", ok, err)
	}
	if ok, err := b.Replace(p, []byte(`{"v":`)); ok || !errors.Is(err, eventlog.ErrInvalid) {
		t.Fatalf("Replace with bad JSON: %v, %v; want ErrInvalid", ok, err)
	}
	if ok, err := b.Replace(p, []byte(`"`+strings.Repeat("x", int(lg.MaxPayload()))+`"`)); ok || !errors.Is(err, eventlog.ErrTooLarge) {
		t.Fatalf("Replace too large: %v, %v; want ErrTooLarge", ok, err)
	}
	runBatcher(t, b)
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.Replace(p, []byte(`{"v":3}`)); ok || err != nil {
		t.Fatalf("Replace of a stored event: %v, %v; want false", ok, err)
	}
	evs, err := lg.Read(ctx, eventlog.Filter{Agent: "a", Stream: "s"}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || string(evs[0].Data) != `{"v":2}` {
		t.Fatalf("stored %v, want the one event with the replaced data", evs)
	}
}
