package replay_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/replay"
)

// TestSSESlowClient: a client that stops reading is disconnected once a
// write waits longer than WriteTimeout; the turn's writes never wait for
// it, and a client reading at its own pace gets every chunk.
func TestSSESlowClient(t *testing.T) {
	e := newEnv(t, func(c *replay.GatewayConfig) { c.WriteTimeout = 300 * time.Millisecond })
	// The slow client: a raw connection that sends the request and never
	// reads the response.
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	b := body("slow")
	fmt.Fprintf(conn, "POST /v1/chat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
	ft := e.turn(t)
	waitFor(t, "the slow client's follower", func() bool { return e.gauge(t, "sse") == 1 })

	// The turn writes far more than the socket buffers hold.
	delta := strings.Repeat("x", 48<<10)
	cs := []chunk.Chunk{{Type: chunk.Start, MessageID: ft.MessageID}, {Type: chunk.TextStart, ID: "t"}}
	for range 400 {
		cs = append(cs, chunk.Chunk{Type: chunk.TextDelta, ID: "t", Delta: delta})
	}
	cs = append(cs, chunk.Chunk{Type: chunk.TextEnd, ID: "t"}, chunk.Chunk{Type: chunk.Finish})
	start := time.Now()
	e.write(t, ft, cs...)
	t.Logf("the turn wrote %d chunks (%d MiB) in %v with a client not reading", len(cs), len(cs)*len(delta)>>20, time.Since(start))

	waitFor(t, "the slow client to be dropped", func() bool { return e.gauge(t, "sse") == 0 })
	if n := counter(t, e, "forever_replay_slow_clients_total"); n != 1 {
		t.Errorf("slow clients counted %v, want 1", n)
	}
	// A client reading at its own pace gets everything.
	resp := get(t, e, "/v1/chat/slow/stream?after=0")
	evs := newSSE(t, resp).rest()
	if got := len(evs) - 1; got != len(cs) {
		t.Fatalf("the reading client got %d chunks, the stream has %d", got, len(cs))
	}
}

// counter returns the value of an unlabelled counter of e's registry.
func counter(t *testing.T, e *env, name string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}
