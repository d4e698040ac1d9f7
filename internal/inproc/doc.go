// Package inproc connects a NATS client to the nats-server embedded in the
// same process without the wait nats-server's in-process pipe imposes on
// every write.
//
// nats-server's InProcessConn is a net.Pipe: a write returns only once the
// server's read loop has read every byte of it, and that loop parses and
// routes each read before it reads again. nats.go's flusher writes while
// holding the connection's lock, so every publisher of the connection
// waits out the server's parse of the previous flush. A socket would have
// taken the bytes into its buffer and returned; Server gives the pipe
// that buffer: a write copies into it and returns, and one goroutine a
// connection moves the bytes into the pipe, in order.
//
// Invariants:
//
//   - Bytes reach the server in the order they were written, each write
//     whole: one goroutine drains the buffer, in order (TestOrder).
//   - The buffer is bounded: a write waits while more than MaxPending
//     bytes wait for the server, as a full socket buffer would make it
//     (TestBoundedPending). One write larger than the bound is taken whole
//     when nothing else waits.
//   - Close delivers what was written before it, waiting at most
//     CloseFlush for a server that stopped reading (TestCloseDelivers).
//   - A failed write to the pipe fails every later write with its error, so
//     the client sees the connection broken as it would a socket's.
//
// Reads, addresses and deadlines go to the pipe as they are.
package inproc
