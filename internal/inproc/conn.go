package inproc

import (
	"net"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Buffer bounds.
const (
	// MaxPending is the most bytes a connection holds for the server
	// before a write waits: the size of a generous socket buffer.
	MaxPending = 8 << 20
	// CloseFlush bounds how long Close waits for the server to take what
	// was written before it.
	CloseFlush = 2 * time.Second
	// keepSpare is the largest drained buffer a connection keeps for reuse,
	// so a burst does not leave two buffers of MaxPending behind.
	keepSpare = 1 << 20
)

// Server is the option that connects to the embedded server p in process
// through a buffered pipe (the package doc): every in-process connection of
// agentd and the bench takes it in place of nats.InProcessServer(p).
func Server(p nats.InProcessConnProvider) nats.Option {
	return nats.InProcessServer(buffered{p})
}

// buffered gives each in-process connection of p a write buffer of its own.
type buffered struct{ p nats.InProcessConnProvider }

func (b buffered) InProcessConn() (net.Conn, error) {
	c, err := b.p.InProcessConn()
	if err != nil {
		return nil, err
	}
	return newConn(c, MaxPending), nil
}

// conn is a net.Conn whose writes go through a buffer that one goroutine
// (writeLoop) drains into the pipe.
type conn struct {
	net.Conn // the pipe: reads, addresses and deadlines
	max      int

	mu      sync.Mutex
	cond    *sync.Cond // pending grew, drained, or the connection closes
	pending []byte     // written, not yet given to the pipe
	spare   []byte     // the buffer writeLoop gave back, reused
	err     error      // the pipe's write error; every later write fails with it
	closing bool
	done    chan struct{} // closed when writeLoop returned

	closeFlush time.Duration
}

func newConn(pipe net.Conn, max int) *conn {
	c := &conn{Conn: pipe, max: max, done: make(chan struct{}), closeFlush: CloseFlush}
	c.cond = sync.NewCond(&c.mu)
	go c.writeLoop()
	return c
}

// Write copies b into the buffer and returns, waiting first while the
// buffer holds more than max bytes.
func (c *conn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.err == nil && !c.closing && len(c.pending) > 0 && len(c.pending)+len(b) > c.max {
		c.cond.Wait()
	}
	switch {
	case c.err != nil:
		return 0, c.err
	case c.closing:
		return 0, net.ErrClosed
	}
	c.pending = append(c.pending, b...)
	c.cond.Broadcast()
	return len(b), nil
}

// writeLoop gives the buffered bytes to the pipe, in order, until the
// connection closed and its buffer is empty, or the pipe failed.
func (c *conn) writeLoop() {
	defer close(c.done)
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for len(c.pending) == 0 && !c.closing {
			c.cond.Wait()
		}
		if len(c.pending) == 0 {
			return // closing, everything delivered
		}
		buf := c.pending
		c.pending, c.spare = c.spare[:0], nil // pending owns the spare now
		c.mu.Unlock()
		_, err := c.Conn.Write(buf)
		c.mu.Lock()
		if cap(buf) <= keepSpare {
			c.spare = buf[:0] // reused; a burst's large buffer goes to the collector
		}
		c.cond.Broadcast() // room for waiting writers
		if err != nil {
			c.err, c.pending = err, nil
			return
		}
	}
}

// Close delivers what was written, waiting at most CloseFlush for the
// server to read it, and closes the pipe.
func (c *conn) Close() error {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return net.ErrClosed
	}
	c.closing = true
	c.cond.Broadcast()
	c.mu.Unlock()
	// A server that stopped reading would hold writeLoop in the pipe's
	// Write: closing the pipe ends that write.
	t := time.AfterFunc(c.closeFlush, func() { _ = c.Conn.Close() })
	<-c.done
	t.Stop()
	return c.Conn.Close()
}
