package eventlog_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestStorageFull: when JetStream's store is full an append fails with
// ErrStorageFull and writes nothing; reads go on; once space returns
// appends succeed again on the same Log.
func TestStorageFull(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{MaxStore: 4 << 20})
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{})
	ctx := t.Context()
	// Ballast in another stream takes most of the room.
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ballast, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BALLAST", Subjects: []string{"ballast"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	big := []byte(strings.Repeat("b", 64<<10))
	for range 40 {
		if _, err := js.Publish(ctx, "ballast", big); err != nil {
			break
		}
	}
	data := []byte(`"` + strings.Repeat("x", 8<<10) + `"`)
	var stored int
	var full error
	for range 2000 {
		if _, err := lg.Append(ctx, eventlog.Event{Agent: "a1", Type: "note", Data: data}); err != nil {
			full = err
			break
		}
		stored++
	}
	if !errors.Is(full, eventlog.ErrStorageFull) {
		t.Fatalf("after %d appends: %v, want ErrStorageFull", stored, full)
	}
	evs, err := lg.Read(ctx, eventlog.Filter{Agent: "a1"}, 0, 0)
	if err != nil || len(evs) != stored {
		t.Fatalf("read with the store full: %d events, %v; want the %d stored", len(evs), err, stored)
	}
	if err := ballast.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := lg.Append(ctx, eventlog.Event{Agent: "a1", Type: "note", Data: data}); err != nil {
		t.Fatalf("append once space returned: %v", err)
	}
}
