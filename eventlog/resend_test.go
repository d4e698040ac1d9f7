package eventlog_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/nats-io/nats.go"
)

// TestPurgeSurvivesReconnect: the connection of a Log resets while
// Compact's purge waits for its answer, which is lost with the old
// connection. The purge is sent again once the connection is back, and
// the compaction completes, instead of waiting out its ack timeout (a
// minute here, as in TestHugeAnswerStoredWhole) to fail. A proxy on the
// JetStream API swallows the first purge and has the server close the
// Log's connection.
func TestPurgeSurvivesReconnect(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	fwd := eventlogtest.Connect(t, s)
	var mu sync.Mutex
	purges := 0
	_, err = fwd.Subscribe("proxy.API.>", func(m *nats.Msg) {
		out := &nats.Msg{Subject: "$JS.API." + strings.TrimPrefix(m.Subject, "proxy.API."), Reply: m.Reply, Data: m.Data, Header: m.Header}
		if strings.HasPrefix(m.Subject, "proxy.API.STREAM.PURGE.") {
			mu.Lock()
			purges++
			first := purges == 1
			mu.Unlock()
			if first {
				// The answer is lost with the connection it was to go to.
				id, err := nc.GetClientID()
				if err == nil {
					err = s.DisconnectClientByID(id)
				}
				if err != nil {
					t.Errorf("close the Log's connection: %v", err)
				}
				return
			}
		}
		if err := fwd.PublishMsg(out); err != nil {
			t.Errorf("forward %s: %v", m.Subject, err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := fwd.Flush(); err != nil { // the server has the proxy's subscription
		t.Fatal(err)
	}
	lg := openCounter(t, s, eventlog.Config{Conn: nc, APIPrefix: "proxy.API", AckTimeout: time.Minute})
	for i := range 3 {
		if _, err := lg.Append(t.Context(), eventlog.Event{Agent: "a1", Type: "tick", Data: json.RawMessage(`1`)}); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if _, err := lg.Compact(t.Context(), "a1"); err != nil {
		t.Fatalf("compact across a reconnect: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if purges < 2 {
		t.Fatalf("%d purges reached the server's API, want the lost one and its resend", purges)
	}
}
