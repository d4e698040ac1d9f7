package eventlog_test

import (
	"errors"
	"strings"
	"testing"
	"time"

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

// TestBatcherReplaceSizeLimit: Replace refuses data as too large exactly
// where Add does, though it builds no message body (seal does): its size
// check counts the envelope Add built around the data.
func TestBatcherReplaceSizeLimit(t *testing.T) {
	lg := eventlogtest.OpenOn(t, eventlogtest.RunServer(t, eventlogtest.ServerOptions{}), eventlog.Config{})
	ctx := t.Context()
	b := lg.NewBatcher(eventlog.BatcherConfig{})
	// One time for every event: its RFC 3339 form drops trailing zeros of
	// the nanoseconds, so events stamped by Add differ in envelope size by
	// up to 10 bytes, and the boundary found for one would not be the
	// other's.
	at := time.Date(2026, 11, 30, 13, 0, 0, 123456789, time.UTC)
	ev := func(data string) eventlog.Event {
		return eventlog.Event{Agent: "a", Stream: "s", Type: "chunk", ID: "s/0", Time: at, Data: []byte(data)}
	}
	str := func(n int) string { return `"` + strings.Repeat("x", n) + `"` }
	// The largest string Add takes, found by bisection.
	lo, hi := 0, int(lg.MaxPayload())
	for lo+1 < hi {
		mid := (lo + hi) / 2
		_, err := b.Add(ctx, ev(str(mid)))
		switch {
		case err == nil:
			lo = mid
		case errors.Is(err, eventlog.ErrTooLarge):
			hi = mid
		default:
			t.Fatal(err)
		}
	}
	p, err := b.Add(ctx, ev(`{"v":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := b.Replace(p, []byte(str(hi))); ok || !errors.Is(err, eventlog.ErrTooLarge) {
		t.Fatalf("Replace with the %d-byte string Add refuses: %v, %v; want ErrTooLarge", hi, ok, err)
	}
	if ok, err := b.Replace(p, []byte(str(lo))); !ok || err != nil {
		t.Fatalf("Replace with the %d-byte string Add takes: %v, %v; want true", lo, ok, err)
	}
	if ok, err := b.Replace(p, nil); !ok || err != nil {
		t.Fatalf("Replace with no data: %v, %v; want true", ok, err)
	}
	if ok, err := b.Replace(p, []byte(`{"v":2}`)); !ok || err != nil {
		t.Fatalf("Replace: %v, %v; want true", ok, err)
	}
}
