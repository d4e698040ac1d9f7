package eventlog_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// lossyProxy forwards a NATS client connection to a server and drops the
// server's messages (MSG/HMSG frames) for which drop returns true: a lost
// acknowledgement, as a reconnect or an overloaded link loses it.
type lossyProxy struct {
	ln   net.Listener
	drop func(subject string, payload []byte) bool
	wg   sync.WaitGroup
}

func newLossyProxy(t *testing.T, s *server.Server, drop func(subject string, payload []byte) bool) *lossyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &lossyProxy{ln: ln, drop: drop}
	addr := s.Addr().String()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				return
			}
			p.wg.Go(func() { io.Copy(up, c); up.Close() })
			p.wg.Go(func() { p.down(c, up); c.Close() })
		}
	})
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *lossyProxy) url() string { return "nats://" + p.ln.Addr().String() }

// down copies server frames to the client, dropping the chosen messages.
func (p *lossyProxy) down(client net.Conn, server net.Conn) {
	defer server.Close()
	r := bufio.NewReader(server)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		f := strings.Fields(string(line))
		if len(f) >= 4 && (f[0] == "MSG" || f[0] == "HMSG") {
			n, err := strconv.Atoi(f[len(f)-1])
			if err != nil {
				return
			}
			body := make([]byte, n+2)
			if _, err := io.ReadFull(r, body); err != nil {
				return
			}
			if p.drop(f[1], body[:n]) {
				continue
			}
			line = append(line, body...)
		}
		if _, err := client.Write(line); err != nil {
			return
		}
	}
}

// dropFirstAck drops the first acknowledgement from the chunks stream.
func dropFirstAck() (func(string, []byte) bool, *atomic.Int32) {
	var dropped atomic.Int32
	return func(subject string, payload []byte) bool {
		if strings.HasPrefix(subject, "_INBOX.") && bytes.Contains(payload, []byte(`"stream":"FOREVER_CHUNKS"`)) &&
			bytes.Contains(payload, []byte(`"seq"`)) {
			return dropped.CompareAndSwap(0, 1)
		}
		return false
	}, &dropped
}

// openLossy opens a Log whose connection loses the first chunk ack.
func openLossy(t *testing.T, cfg eventlog.Config) (*eventlog.Log, *atomic.Int32) {
	t.Helper()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	drop, dropped := dropFirstAck()
	px := newLossyProxy(t, s, drop)
	nc, err := nats.Connect(px.url())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cfg.Conn = nc
	// Short, so the test does not wait long for the loss to show; the
	// test asserts no timing.
	cfg.AckTimeout = 200 * time.Millisecond
	return eventlogtest.OpenOn(t, s, cfg), dropped
}

// guard bounds a test that would hang before the fix.
func guard(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func chunk(i int) eventlog.Event {
	return eventlog.Event{Agent: "a1", Stream: "s1", Type: "chunk", ID: fmt.Sprintf("s1/%d", i), Data: json.RawMessage(strconv.Itoa(i))}
}

// storedOnce checks that the chunks of s1 are exactly ids s1/0..n-1 in order.
func storedOnce(t *testing.T, lg *eventlog.Log, n int) {
	t.Helper()
	got, err := lg.Read(t.Context(), eventlog.Filter{Agent: "a1", Stream: "s1"}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range got {
		ids = append(ids, e.ID)
	}
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("s1/%d", i))
	}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("stored %v, want %v", ids, want)
	}
}

// TestBatcherLostAck: under AsyncBatches (sync interval) a lost ack is
// retried with the same message id: Wait returns, the event is stored once,
// and Run's shutdown is not stalled.
func TestBatcherLostAck(t *testing.T) {
	lg, dropped := openLossy(t, eventlog.Config{AsyncBatches: true})
	ctx := guard(t)
	b := lg.NewBatcher(eventlog.BatcherConfig{})
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(rctx) }()
	var ps []*eventlog.Pending
	for i := range 3 {
		p, err := b.Add(ctx, chunk(i))
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	for i, p := range ps {
		if seq, err := p.Wait(ctx); err != nil || seq != eventlog.Seq(i+1) {
			t.Fatalf("chunk %d: seq %d, %v; want %d, nil", i, seq, err, i+1)
		}
	}
	if dropped.Load() != 1 {
		t.Fatal("no ack was dropped")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	storedOnce(t, lg, 3)
}

// TestBatcherPipelinedLostAck: a lost ack of a pipelined chain's first
// chunk is retried with the same message id: every Wait returns nil and
// each chunk is stored once, in order.
func TestBatcherPipelinedLostAck(t *testing.T) {
	lg, dropped := openLossy(t, eventlog.Config{})
	eventlog.ForceSend(lg, "pipelined")
	ctx := guard(t)
	b := lg.NewBatcher(eventlog.BatcherConfig{MaxCount: 3, MaxDelay: time.Hour})
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(rctx) }()
	var ps []*eventlog.Pending
	for i := range 3 {
		p, err := b.Add(ctx, chunk(i))
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	for i, p := range ps {
		if _, err := p.Wait(ctx); err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
	}
	if dropped.Load() != 1 {
		t.Fatal("no ack was dropped")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	storedOnce(t, lg, 3)
}

// TestAppendBatchAsyncLostAck: AppendBatch with AsyncBatches returns once
// a lost ack's retry is acknowledged, the event stored once.
func TestAppendBatchAsyncLostAck(t *testing.T) {
	lg, dropped := openLossy(t, eventlog.Config{AsyncBatches: true})
	ctx := guard(t)
	evs := []eventlog.Event{chunk(0), chunk(1), chunk(2)}
	if last, err := lg.AppendBatch(ctx, evs); err != nil || last != 3 {
		t.Fatalf("AppendBatch = %d, %v; want 3, nil", last, err)
	}
	if dropped.Load() != 1 {
		t.Fatal("no ack was dropped")
	}
	storedOnce(t, lg, 3)
}

// TestBatcherLostCommitAnswer: an atomic batch whose commit answer is lost
// fails its events after the ack timeout instead of stalling the Batcher
// and its shutdown (which commits under a context without deadline), with
// ErrUnconfirmed: the batch may be stored, so a turn leaves itself for
// recovery rather than recording a failure its stream cannot end.
func TestBatcherLostCommitAnswer(t *testing.T) {
	lg, dropped := openLossy(t, eventlog.Config{})
	eventlog.ForceSend(lg, "atomic")
	ctx := guard(t)
	b := lg.NewBatcher(eventlog.BatcherConfig{MaxCount: 2, MaxDelay: time.Hour})
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(rctx) }()
	p0, err := b.Add(ctx, chunk(0))
	if err != nil {
		t.Fatal(err)
	}
	p1, err := b.Add(ctx, chunk(1))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*eventlog.Pending{p0, p1} {
		if _, err := p.Wait(ctx); err == nil || ctx.Err() != nil || !errors.Is(err, eventlog.ErrUnconfirmed) {
			t.Fatalf("Wait = %v, want the lost answer's ErrUnconfirmed", err)
		}
	}
	// On a loaded machine the answer may come after the ack timeout (the
	// batch fails the same way), and is dropped when it comes.
	waitfor.True(t, "the commit answer dropped", func() bool { return dropped.Load() == 1 })
	// The Batcher goes on: the next event is stored, then Run stops.
	p2, err := b.Add(ctx, chunk(2))
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}
