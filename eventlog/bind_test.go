package eventlog_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// infoRelay forwards the JetStream API under proxy.API to the server's,
// answering the first refuse[name] stream info requests of each stream
// "cluster unavailable", as a clustered stream electing its leader does.
// It counts the info requests of each stream.
type infoRelay struct {
	mu     sync.Mutex
	refuse map[string]int
	asked  map[string]int
}

func runInfoRelay(t *testing.T, fwd *nats.Conn, refuse map[string]int) *infoRelay {
	t.Helper()
	r := &infoRelay{refuse: refuse, asked: map[string]int{}}
	const info = "proxy.API.STREAM.INFO."
	_, err := fwd.Subscribe("proxy.API.>", func(m *nats.Msg) {
		if name, ok := strings.CutPrefix(m.Subject, info); ok {
			r.mu.Lock()
			r.asked[name]++
			refused := r.asked[name] <= r.refuse[name]
			r.mu.Unlock()
			if refused {
				if err := m.Respond([]byte(`{"type":"io.nats.jetstream.api.v1.stream_info_response","error":{"code":503,"err_code":10008,"description":"JetStream cluster temporarily unavailable"}}`)); err != nil {
					t.Errorf("refuse %s: %v", m.Subject, err)
				}
				return
			}
		}
		forwardToJS(t, fwd, m)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := fwd.Flush(); err != nil { // the server has the relay's subscription
		t.Fatal(err)
	}
	return r
}

func (r *infoRelay) count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.asked[name]
}

// TestBindRetriesAStreamElecting: a client that binds the existing
// streams (agentd verify, backup) asks a stream's info again while
// JetStream answers that its cluster is unavailable, as a stream electing
// a leader after a node's death does. Asked once, chaos's end-of-run
// verify failed "bind stream FOREVER_EVENTS_4 (is agentd running?)". A
// missing stream is still refused at once.
func TestBindRetriesAStreamElecting(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	eventlogtest.OpenOn(t, s, eventlog.Config{})
	relay := runInfoRelay(t, eventlogtest.Connect(t, s), map[string]int{eventlog.DefaultEventsStream: 3})

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := eventlog.Open(ctx, eventlog.Config{Conn: eventlogtest.Connect(t, s), APIPrefix: "proxy.API", Bind: true})
	if err != nil {
		t.Fatalf("bind while the events stream elects: %v", err)
	}
	c.Close()
	if n := relay.count(eventlog.DefaultEventsStream); n < 4 {
		t.Errorf("the events stream's info asked %d times, want 3 refused and 1 answered", n)
	}

	_, err = eventlog.Open(ctx, eventlog.Config{Conn: eventlogtest.Connect(t, s), APIPrefix: "proxy.API", Bind: true, EventsStream: "MISSING"})
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("bind of a missing stream: %v, want jetstream.ErrStreamNotFound", err)
	}
	// Asked as the unsharded stream (missing), then as its shard 0
	// (missing too), then bound: once each, none again.
	if n := relay.count("MISSING"); n != 2 {
		t.Errorf("the missing stream's info asked %d times, want 2 (the probe and the bind)", n)
	}
}
