package inproc

import (
	"net"
	"time"
)

// NewConn wraps pipe with a buffer of max bytes, for the tests of the
// buffer alone.
func NewConn(pipe net.Conn, max int, closeFlush time.Duration) net.Conn {
	c := newConn(pipe, max)
	c.closeFlush = closeFlush
	return c
}

// Pending is how many bytes c holds for the pipe.
func Pending(c net.Conn) int {
	b := c.(*conn)
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}
