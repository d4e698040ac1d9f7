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
	// Fetches that return at once, one event a fetch.
	got, err = storedOnce(ctx, js, map[string][]string{"EV": {"EV.a", "EV.b"}}, from, time.Time{}, readOpts{batch: 1, noWait: true})
	if err != nil || len(got["a"]) != 3 || len(got["b"]) != 2 {
		t.Errorf("one event a fetch, at once: a %d, b %d events, %v; want 3, 2", len(got["a"]), len(got["b"]), err)
	}
	got, err = storedOnce(ctx, js, map[string][]string{"OLD": {"OLD.a"}}, since, time.Time{}, readOpts{})
	if err != nil || len(got["a"]) != 0 {
		t.Errorf("read of a stream with nothing since from: %v, %v; want none", got, err)
	}
}

// TestCovers: a snapshot part's envelope gives the stream sequence of the
// last event it covers (its shard's bits dropped); any other event, one
// whose data only quotes the type among them, gives 0.
func TestCovers(t *testing.T) {
	snap := `{"agent":"a","type":"log.snapshot","id":"x","time":"2026-12-01T00:00:00Z","data":{"upto":1099511628830,"part":0,"parts":1,"views":{}}}`
	if got := covers([]byte(snap)); got != 1054 {
		t.Errorf("snapshot of shard 1 up to its sequence 1054: covers %d", got)
	}
	quoted := `{"agent":"a","type":"op.completed","id":"y","time":"2026-12-01T00:00:00Z","data":{"note":{"type":"log.snapshot"},"upto":7}}`
	for _, body := range []string{quoted, `{"agent":"a","type":"fiber.started","id":"z","time":"2026-12-01T00:00:00Z"}`, `not json`} {
		if got := covers([]byte(body)); got != 0 {
			t.Errorf("covers(%s) = %d, want 0", body, got)
		}
	}
}

// TestTail: each Read returns the events stored since the one before,
// through one consumer kept between reads (none created for a read with
// nothing new), and a Read after its consumer was deleted makes a new one
// from after the last event read.
func TestTail(t *testing.T) {
	ctx := t.Context()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	js, err := jetstream.New(eventlogtest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EV", Subjects: []string{"EV.>"}, AllowDirect: true})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(subjects ...string) {
		for _, subj := range subjects {
			if _, err := js.Publish(ctx, subj, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	consumers := func() int {
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Consumers
	}
	tail := NewTail(js, "EV", []string{"EV.a", "EV.b"}, time.Now().Add(-time.Minute))
	read := func(what string, a, b int) {
		t.Helper()
		got, err := tail.Read(ctx)
		if err != nil || len(got["a"]) != a || len(got["b"]) != b || len(got["other"]) != 0 {
			t.Fatalf("%s: a %d, b %d, other %d events, %v; want %d, %d, 0", what, len(got["a"]), len(got["b"]), len(got["other"]), err, a, b)
		}
	}
	read("no event yet", 0, 0)
	if n := consumers(); n != 0 {
		t.Fatalf("a read of nothing created %d consumers", n)
	}
	publish("EV.a", "EV.other", "EV.b", "EV.a")
	read("first", 2, 1)
	publish("EV.b", "EV.other")
	read("second", 0, 1)
	read("nothing new", 0, 0)
	if n := consumers(); n != 1 {
		t.Fatalf("%d consumers after three reads, want the one kept", n)
	}
	names := st.ConsumerNames(ctx)
	for name := range names.Name() {
		if err := st.DeleteConsumer(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	publish("EV.a")
	for try := 0; ; try++ { // the deleted consumer's fetch fails, once
		got, err := tail.Read(ctx)
		if err == nil {
			if len(got["a"]) != 1 || len(got["b"]) != 0 {
				t.Fatalf("after its consumer was deleted: a %d, b %d events; want the new a alone", len(got["a"]), len(got["b"]))
			}
			break
		}
		if try == 3 {
			t.Fatalf("reads after the consumer was deleted: %v", err)
		}
	}
}
