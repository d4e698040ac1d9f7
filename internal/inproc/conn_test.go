package inproc_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/inproc"
	"github.com/nats-io/nats.go"
)

// TestOrder publishes through a buffered in-process connection to a real
// embedded server, in sizes around the client's and the buffer's, and a
// subscriber on a socket gets every message whole and in order.
func TestOrder(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	sub := eventlogtest.Connect(t, s)
	pub, err := nats.Connect(s.ClientURL(), inproc.Server(s))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	const n = 500
	got := make(chan *nats.Msg, n)
	if _, err := sub.ChanSubscribe("order", got); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	body := func(i int) []byte {
		size := []int{1, 100, 4 << 10, 40 << 10, 300 << 10}[i%5]
		return bytes.Repeat([]byte{byte('a' + i%26)}, size)
	}
	for i := range n {
		if err := pub.Publish("order", append([]byte(strconv.Itoa(i)+":"), body(i)...)); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		select {
		case m := <-got:
			want := append([]byte(strconv.Itoa(i)+":"), body(i)...)
			if !bytes.Equal(m.Data, want) {
				t.Fatalf("message %d: got %d bytes starting %.12q, want %d starting %.12q", i, len(m.Data), m.Data, len(want), want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("message %d of %d never arrived", i, n)
		}
	}
}

// TestRequestReply: a request through the buffered connection gets its
// reply (both directions work, the server's writes included).
func TestRequestReply(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	srv := eventlogtest.Connect(t, s)
	if _, err := srv.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := srv.Flush(); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.ClientURL(), inproc.Server(s))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for i := range 100 {
		want := fmt.Sprintf("ping %d", i)
		m, err := nc.Request("echo", []byte(want), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Data) != want {
			t.Fatalf("reply %q, want %q", m.Data, want)
		}
	}
}

// TestBoundedPending: with nobody reading the pipe, writes stop at the
// bound; one write larger than the bound is taken when nothing waits.
func TestBoundedPending(t *testing.T) {
	local, remote := net.Pipe()
	defer remote.Close()
	const max = 1000
	c := inproc.NewConn(local, max, 50*time.Millisecond)
	defer c.Close()
	// The first write goes to writeLoop, which blocks in the pipe holding it.
	if _, err := c.Write(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return inproc.Pending(c) == 0 })
	if _, err := c.Write(make([]byte, 3*max)); err != nil {
		t.Fatalf("a write larger than the bound into an empty buffer: %v", err)
	}
	blocked := make(chan error, 1)
	go func() {
		_, err := c.Write(make([]byte, 10))
		blocked <- err
	}()
	select {
	case err := <-blocked:
		t.Fatalf("a write past the bound returned (%v) while nobody read", err)
	case <-time.After(100 * time.Millisecond):
	}
	if p := inproc.Pending(c); p != 3*max {
		t.Fatalf("pending %d bytes, want %d", p, 3*max)
	}
	// Reading makes room: the waiting write goes through.
	go func() { _, _ = io.Copy(io.Discard, remote) }()
	select {
	case err := <-blocked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting write never went through once the pipe was read")
	}
}

// TestCloseDelivers: what was written before Close reaches the reader,
// and Close returns within its bound when nobody reads.
func TestCloseDelivers(t *testing.T) {
	local, remote := net.Pipe()
	c := inproc.NewConn(local, 1<<20, 5*time.Second)
	want := bytes.Repeat([]byte("x"), 100<<10)
	read := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(remote)
		read <- b
	}()
	if _, err := c.Write(want); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := <-read; !bytes.Equal(got, want) {
		t.Fatalf("the reader got %d bytes, want %d", len(got), len(want))
	}
	if _, err := c.Write([]byte("late")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a write after Close: %v, want net.ErrClosed", err)
	}

	local, remote = net.Pipe()
	defer remote.Close()
	c = inproc.NewConn(local, 1<<20, 50*time.Millisecond)
	if _, err := c.Write(want); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = c.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited past its bound for a reader that never reads")
	}
}

// TestWriteErrorSticks: once the pipe failed, every later write fails.
func TestWriteErrorSticks(t *testing.T) {
	local, remote := net.Pipe()
	c := inproc.NewConn(local, 1<<20, 50*time.Millisecond)
	defer c.Close()
	remote.Close()
	if _, err := c.Write([]byte("lost")); err != nil {
		t.Fatalf("the first write is only buffered: %v", err)
	}
	waitFor(t, func() bool {
		_, err := c.Write([]byte("x"))
		return err != nil
	})
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
