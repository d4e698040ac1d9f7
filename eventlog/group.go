package eventlog

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// How a group of messages (a Batcher's chunks, the events of several
// agents) is sent: as one JetStream atomic batch, or one by one without
// waiting in between (pipelined).
//
// Under sync always an atomic batch costs one fsync of the stream, but on an
// R1 file stream nats-server first stages the batch in a store of its own
// that it creates, syncs and deletes for every batch (directories, files,
// four fsyncs): measured here at 8-25 ms for a batch of 2 to 128 messages,
// against 0.3-0.5 ms for one synced publish. So a small group is cheaper
// pipelined (one fsync per message, no staging) and a large one as a batch;
// sendCost learns both costs from the sends themselves and picks.
//
// A replicated stream always takes a group of two or more as an atomic
// batch: its staging is in memory, and a pipelined chain's
// Nats-Expected-Last-Msg-Id is checked again by every replica as it
// applies its Raft log, against a last message id that a replica restarted
// after a SIGKILL rebuilds from its own store. In nats-server 2.15.2 a
// mismatch there is a "critical write error" that takes the replica out
// of service for good (the 3-node chaos run hit it once in 81 kills).
const (
	// headerExpectedLastMsgID makes the server store a message only if the
	// stream's last message carries that message id: the chain that keeps
	// a pipelined group in order and without gaps.
	headerExpectedLastMsgID = "Nats-Expected-Last-Msg-Id"
	// codeWrongLastMsgID is the server's refusal of a broken chain.
	codeWrongLastMsgID = 10070
	// atomicMinR1 is the smallest group sent as an atomic batch to an R1
	// stream before the costs are measured: the crossover measured on a
	// 2-core VM's ext4 was 16-32 messages.
	atomicMinR1 = 16
	// costWeight is the weight of the newest sample in the moving averages.
	costWeight = 0.2
)

// sendCost is the measured cost of the two ways of sending a group to one
// stream: an exponentially weighted moving average of the time per message
// sent one by one, and of the time per atomic batch (its size matters
// little: one fsync either way). Safe for concurrent use.
type sendCost struct {
	replicated bool // replicas > 1: batches are staged in memory
	// force, set only by tests, fixes the choice: 1 atomic batches (of 2
	// or more), -1 pipelined.
	force int

	mu     sync.Mutex
	perMsg float64 // seconds per pipelined message; 0 until measured
	batch  float64 // seconds per atomic batch; 0 until measured
}

// atomic reports whether a group of k messages is cheaper as an atomic
// batch.
func (c *sendCost) atomic(k int) bool {
	if k < 2 || c.force < 0 {
		return false
	}
	if c.force > 0 || c.replicated {
		return true
	}
	c.mu.Lock()
	perMsg, batch := c.perMsg, c.batch
	c.mu.Unlock()
	if batch > 0 && perMsg > 0 {
		return float64(k)*perMsg >= batch
	}
	return k >= atomicMinR1
}

// observe adds the time d one send of k messages took.
func (c *sendCost) observe(atomic bool, k int, d time.Duration) {
	if k < 1 || d <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	avg := func(old, sample float64) float64 {
		if old == 0 {
			return sample
		}
		return old + costWeight*(sample-old)
	}
	if atomic {
		c.batch = avg(c.batch, d.Seconds())
	} else {
		c.perMsg = avg(c.perMsg, d.Seconds()/float64(k))
	}
}

// cost returns the send costs of stream.
func (l *Log) cost(stream string) *sendCost {
	if h := l.handleOf(stream); h != nil {
		return &h.cost
	}
	return &sendCost{} // not a stream of the log: a send to it fails
}

// wire is one message of a group send and its outcome.
type wire struct {
	msg *nats.Msg
	// expect is the expected last sequence of the message's subject (the
	// fence); nil for none.
	expect *Seq
	// Set by the send.
	seq Seq
	err error // translated
	// dup: acknowledged as a duplicate of a message stored before (seq is
	// that message's). Not set for a duplicate acknowledgement of our own
	// retry, which is the first publish's.
	dup bool
}

// setHeaders prepares w's message for a pipelined send (prev is the message
// sent right before it in a chain, nil for none) or, with atomic, for an
// atomic batch, which refuses the chain header.
func (w *wire) setHeaders(prev *nats.Msg, atomic bool) {
	h := w.msg.Header
	if w.expect != nil {
		h.Set(headerExpectedLastSubSeq, seqString(*w.expect))
	} else {
		h.Del(headerExpectedLastSubSeq)
	}
	if prev != nil && !atomic {
		h.Set(headerExpectedLastMsgID, prev.Header.Get(jetstream.MsgIDHeader))
	} else {
		h.Del(headerExpectedLastMsgID)
	}
	if !atomic {
		h.Del(headerBatchID)
		h.Del(headerBatchSeq)
		h.Del(headerBatchCommit)
	}
}

// sendPipelined publishes ws one by one without waiting in between, then
// waits for every acknowledgement, and sets each wire's outcome. With
// chain, every message but the first expects the one before it to be the
// stream's last message (every message needs a message id): the server
// then stores a prefix of ws in order and refuses the rest, so a failure
// part way never leaves a gap, and no other writer's message lands inside
// the group. Without chain the messages are independent (the events of
// different agents, each fenced on its own subject).
func (l *Log) sendPipelined(ctx context.Context, stream string, ws []*wire, chain bool) {
	start := time.Now()
	futs := make([]jetstream.PubAckFuture, len(ws))
	var prev *nats.Msg
	var broken error
	gen := l.elections.next(stream)
	for i, w := range ws {
		if broken != nil {
			w.err = broken // not sent: the chain would refuse it anyway
			continue
		}
		if !chain {
			prev = nil
		}
		w.setHeaders(prev, false)
		l.skewHeader(w.msg)
		fut, err := l.js.PublishMsgAsync(w.msg, jetstream.WithStallWait(l.cfg.AckTimeout))
		if err != nil {
			w.err = l.translate(err, nil)
			if chain {
				broken = w.err
			}
			continue
		}
		futs[i], prev = fut, w.msg
	}
	ok := 0
	for i, w := range ws {
		if futs[i] == nil {
			continue
		}
		ack, retried, err := l.awaitAck(context.WithoutCancel(ctx), stream, gen, futs[i], w.msg)
		if err != nil {
			w.err = l.translate(err, nil)
			continue
		}
		w.seq, w.dup = l.seqOf(stream, ack.Sequence), ack.Duplicate && !retried
		if !w.dup {
			ok++
		}
	}
	l.cost(stream).observe(false, len(ws), time.Since(start))
	if ok > 0 {
		l.metrics.observeAppend(stream, "pipelined", ok, time.Since(start))
	}
}

// sendAtomic sends ws as one atomic batch, each message with its own
// expected subject sequence, and returns the batch's error: on success
// every wire has its sequence; on failure nothing was stored (or, when the
// answer was lost, the outcome is unknown) and no wire is set.
func (l *Log) sendAtomic(ctx context.Context, stream string, ws []*wire) error {
	msgs := make([]*nats.Msg, len(ws))
	for i, w := range ws {
		w.setHeaders(nil, true)
		l.skewHeader(w.msg)
		msgs[i] = w.msg
	}
	start := time.Now()
	last, err := l.commitBatch(ctx, stream, msgs, nil)
	if err != nil {
		return err
	}
	l.cost(stream).observe(true, len(ws), time.Since(start))
	n := Seq(len(ws))
	for i, w := range ws {
		// An atomic batch is stored contiguously.
		w.seq = last - (n - 1 - Seq(i))
	}
	return nil
}

// brokenChain reports whether err is the server refusing a message of a
// chain because the message before it is not the stream's last.
func brokenChain(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == codeWrongLastMsgID
}

func seqString(s Seq) string { return strconv.FormatUint(rawSeq(s), 10) }
