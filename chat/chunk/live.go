package chunk

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/forever-agents/forever/eventlog"
)

// Live passes a chat stream's chunk events, as their writer learns they
// are stored, to the processes following the stream, over core NATS: no
// JetStream consumer, so no proposal of the meta group (which every
// server of a cluster stores and applies) per follow.
//
// The writer (a Writer made with PublishLive) publishes each stored event
// on <prefix>.live.<agent>.<stream> with its stream sequence and the
// sequence of the stream's event before it ("prev"), as far as the writer
// knows it (it does for a stream it wrote from chunk 0). Nobody
// acknowledges a live message and nothing waits for a follower: a slow or
// absent one never holds a writer back; the server or the follower's
// subscription drops what it cannot take. A follower (replay.Client made
// with WithLive) therefore takes a live event only when prev shows it
// follows the last one it has, and otherwise reads the stored chunks,
// which are the source of truth, up to it: nothing is yielded twice or
// skipped, whatever the live messages lost.
//
// The subject is outside every JetStream stream's subjects (<prefix>.evt.>,
// <prefix>.chunk.>), so nothing stores it.
type Live struct {
	nc     *nats.Conn
	prefix string

	published prometheus.Counter
	failed    prometheus.Counter
}

// NewLive returns a Live on nc for the log with subject prefix prefix
// (eventlog.Log.Prefix). reg, when not nil, gets its metrics.
func NewLive(nc *nats.Conn, prefix string, reg prometheus.Registerer) (*Live, error) {
	l := &Live{
		nc: nc, prefix: prefix,
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_chunk_live_published_total",
			Help: "Stored chunk events published to live followers (chunk.Live).",
		}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_chunk_live_publish_errors_total",
			Help: "Stored chunk events that could not be published to live followers (they read them from the log).",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{l.published, l.failed} {
			if err := reg.Register(c); err != nil {
				var are prometheus.AlreadyRegisteredError
				if !errors.As(err, &are) {
					return nil, err
				}
			}
		}
	}
	return l, nil
}

// Subject is where the live events of agent's stream are published.
func (l *Live) Subject(agent, stream string) string {
	return l.prefix + ".live." + agent + "." + stream
}

// publish sends e, stored, with prev the sequence of the stream's event
// before it, when known. It never blocks on a follower.
func (l *Live) publish(e eventlog.Event, prev eventlog.Seq, known bool) {
	b := make([]byte, 0, 24+len(e.Type)+len(e.Data))
	b = binary.AppendUvarint(b, uint64(e.Seq))
	p := uint64(0) // unknown
	if known {
		p = uint64(prev) + 1
	}
	b = binary.AppendUvarint(b, p)
	b = binary.AppendUvarint(b, uint64(len(e.Type)))
	b = append(b, e.Type...)
	b = append(b, e.Data...)
	if err := l.nc.Publish(l.Subject(e.Agent, e.Stream), b); err != nil {
		l.failed.Inc()
		return
	}
	l.published.Inc()
}

// LiveEvent is one event a follower received: the stored event (Agent,
// Stream, Type, Data, Seq) and the sequence of the stream's event before
// it when the writer knew it (PrevKnown; Prev 0 then means none before).
type LiveEvent struct {
	Event     eventlog.Event
	Prev      eventlog.Seq
	PrevKnown bool
}

// Follows reports whether ev comes right after a follower's last event
// at cursor seq cur (the stream's last event it has, or the cursor it
// started after): no event of the stream lies between them.
func (ev LiveEvent) Follows(cur eventlog.Seq) bool {
	return ev.PrevKnown && ev.Prev <= cur
}

func decodeLive(agent, stream string, b []byte) (LiveEvent, error) {
	seq, n := binary.Uvarint(b)
	if n <= 0 {
		return LiveEvent{}, errors.New("chunk: live event: bad sequence")
	}
	b = b[n:]
	prev, n := binary.Uvarint(b)
	if n <= 0 {
		return LiveEvent{}, errors.New("chunk: live event: bad previous sequence")
	}
	b = b[n:]
	tl, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < tl {
		return LiveEvent{}, errors.New("chunk: live event: bad type")
	}
	b = b[n:]
	ev := LiveEvent{Event: eventlog.Event{
		Agent: agent, Stream: stream, Type: string(b[:tl]), Data: b[tl:], Seq: eventlog.Seq(seq),
	}}
	if prev > 0 {
		ev.Prev, ev.PrevKnown = eventlog.Seq(prev-1), true
	}
	return ev, nil
}

// LiveSub receives the live events of one stream. Its buffer is bounded:
// past it the messages are dropped (the follower reads them from the
// log), so a follower that does not keep up never holds the connection
// it shares with the node.
type LiveSub struct {
	sub           *nats.Subscription
	agent, stream string
}

// liveFlushTimeout bounds Subscribe's round trip to the server.
const liveFlushTimeout = 5 * time.Second

// liveBuffer bounds a LiveSub's buffer: messages and bytes.
const (
	liveBufferMsgs  = 1024
	liveBufferBytes = 8 << 20
)

// Subscribe starts receiving the live events of agent's stream. The
// subscription is registered with the server the connection is on when it
// returns; other servers learn of it shortly after, so events published
// meanwhile by a writer elsewhere may be missed: subscribe before reading
// the stored ones. Close it when done.
//
// Its buffer is a channel the size of the connection's nats.SyncQueueLen,
// of which it uses liveBufferMsgs: give the connection a small one
// (agentd's is 1,024). nats.go's default, 65,536, is a 512 KiB channel
// allocated for each follow and scanned by the collector while it lives.
func (l *Live) Subscribe(ctx context.Context, agent, stream string) (*LiveSub, error) {
	sub, err := l.nc.SubscribeSync(l.Subject(agent, stream))
	if err != nil {
		return nil, fmt.Errorf("chunk: subscribe to live chunks of %s/%s: %w", agent, stream, err)
	}
	if err := sub.SetPendingLimits(liveBufferMsgs, liveBufferBytes); err != nil {
		sub.Unsubscribe()
		return nil, fmt.Errorf("chunk: subscribe to live chunks of %s/%s: %w", agent, stream, err)
	}
	fctx, cancel := context.WithTimeout(ctx, liveFlushTimeout)
	defer cancel()
	if err := l.nc.FlushWithContext(fctx); err != nil {
		sub.Unsubscribe()
		return nil, fmt.Errorf("chunk: subscribe to live chunks of %s/%s: %w", agent, stream, err)
	}
	return &LiveSub{sub: sub, agent: agent, stream: stream}, nil
}

// Next returns the next live event, or ctx's error (a deadline is how a
// follower polls). A message that does not decode is an error too.
func (s *LiveSub) Next(ctx context.Context) (LiveEvent, error) {
	m, err := s.sub.NextMsgWithContext(ctx)
	if err != nil {
		return LiveEvent{}, err
	}
	return decodeLive(s.agent, s.stream, m.Data)
}

// Close ends the subscription.
func (s *LiveSub) Close() error { return s.sub.Unsubscribe() }

// livePub is a Writer's publisher of its stored events (PublishLive).
type livePub struct {
	l  *Live
	mu sync.Mutex // the hooks run in order, maybe in different goroutines
	// last is the sequence of the stream's last event the writer knows
	// stored, known when the writer wrote the stream from chunk 0 and
	// has seen each event since stored (not a duplicate of an earlier
	// publish, which may have been stored elsewhere in the stream).
	last  eventlog.Seq
	known bool
}

// done is the OnDone hook of each event the Writer adds.
func (lp *livePub) done(p *eventlog.Pending) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if _, err := p.Wait(context.Background()); err != nil {
		// Failed, or a duplicate: what comes next cannot say what is
		// before it; followers read the log up to it.
		lp.known = false
		return
	}
	e := p.Event()
	lp.l.publish(e, lp.last, lp.known)
	lp.last, lp.known = e.Seq, true
}

// PublishLive makes the Writer publish each chunk event it learns is
// stored to l's live followers (see Live). A nil l publishes nothing.
func PublishLive(l *Live) WriterOption {
	return func(w *Writer) {
		if l != nil {
			w.live = &livePub{l: l}
		}
	}
}
