package stalls

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestStoredFromReplicaBehind: a stream's read returns every event of its
// subjects up to the last one its leader held when the read began, even
// when the consumer, on a replica behind the leader, says none pending
// before it; a stream with nothing since from reads nothing (and ends).
func TestStoredFromReplicaBehind(t *testing.T) {
	ctx := t.Context()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	js, err := jetstream.New(eventlogtest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"EV", "OLD"} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, AllowDirect: true}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.Publish(ctx, "OLD.a", nil); err != nil {
		t.Fatal(err)
	}
	from := time.Now().Add(-time.Minute)
	if _, err := js.Publish(ctx, "EV.other", nil); err != nil { // not read: another agent
		t.Fatal(err)
	}
	for _, subj := range []string{"EV.a", "EV.b", "EV.other", "EV.a", "EV.b", "EV.a"} {
		if _, err := js.Publish(ctx, subj, nil); err != nil {
			t.Fatal(err)
		}
	}
	since := time.Now().Add(time.Minute) // past OLD's event: nothing there to read
	first := true
	// One event a fetch: the first one's batch is all the replica holds.
	got, err := storedOnce(ctx, js, map[string][]string{"EV": {"EV.a", "EV.b"}}, from, time.Time{}, readOpts{batch: 1, delivered: func(md *jetstream.MsgMetadata) {
		if first {
			md.NumPending = 0 // all the replica holds yet
			first = false
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got["a"]) != 3 || len(got["b"]) != 2 || len(got["other"]) != 0 {
		t.Errorf("read from a replica behind: a %d, b %d, other %d events; want 3, 2, 0", len(got["a"]), len(got["b"]), len(got["other"]))
	}
	got, err = storedOnce(ctx, js, map[string][]string{"OLD": {"OLD.a"}}, since, time.Time{}, readOpts{})
	if err != nil || len(got["a"]) != 0 {
		t.Errorf("read of a stream with nothing since from: %v, %v; want none", got, err)
	}
}
