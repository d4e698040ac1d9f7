package replay

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/promreg"
)

// WithLive makes a Client follow a stream's live chunks through l (the
// writer's chunk.Live publications, core NATS) instead of a JetStream
// consumer: see followLive. reg, when not nil, gets its metrics
// (forever_replay_live_reads_total, forever_replay_live_fallbacks_total).
// Use it where the stream's writers publish (agentd's nodes do).
func WithLive(l *chunk.Live, reg prometheus.Registerer) ClientOption {
	return func(c *Client) {
		c.live, c.livePoll, c.liveMaxPoll = l, livePoll, liveMaxPoll
		m := &liveMetrics{
			reads: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "forever_replay_live_reads_total",
				Help: "Reads of stored chunks by live follows, by why: gap (a live chunk did not follow the last one yielded) or idle (no live chunk for a while).",
			}, []string{"why"}),
			fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "forever_replay_live_fallbacks_total",
				Help: "Live follows that went on with a JetStream consumer, by why: unpublished (stored chunks came and no live one), gap (a gap the stored chunks did not fill), error.",
			}, []string{"why"}),
		}
		if reg != nil {
			if r, err := promreg.Register(reg, m.reads); err == nil {
				m.reads = r
			}
			if f, err := promreg.Register(reg, m.fallbacks); err == nil {
				m.fallbacks = f
			}
		}
		c.liveMetrics = m
	}
}

type liveMetrics struct {
	reads     *prometheus.CounterVec
	fallbacks *prometheus.CounterVec
}

// A live follow reads the stored chunks when no live one came for
// livePoll, then twice as long after each read that found none, up to
// liveMaxPoll: the live message of a stream's last chunks may have been
// lost (published before the subscription reached the writer's server, or
// while the connection was down), and the writer may be gone (the agent's
// new owner writes the rest, publishing it too) or not publish at all (a
// node of an earlier release: when a read finds chunks and no live one
// ever came, a consumer goes on). Reads are direct gets; a turn waiting
// for its first chunk costs one every livePoll at most, where the
// consumer it replaces cost two meta-group proposals. A gap a live chunk
// shows is read from the log, fillTries times fillWait apart at most (a
// replica that answers a read may be a little behind), then a consumer
// goes on.
const (
	livePoll    = 5 * time.Second
	liveMaxPoll = 30 * time.Second
	fillTries   = 20
	fillWait    = 25 * time.Millisecond
)

// followLive hands handle the stream's events after cur: each live event
// that follows the last one handled (chunk.LiveEvent.Follows), and the
// stored ones (eventlog.Log.NextBatch) wherever a live one shows a gap or
// none comes. So every event after cur is handled once and in order,
// whatever the live messages lost: the log is the source of truth. It
// returns the sequence of the last event handled and whether a consumer
// must go on from there (false: the follow ended, handle said so or ctx
// is done).
func (c *Client) followLive(ctx context.Context, f eventlog.Filter, sub *chunk.LiveSub, cur eventlog.Seq, handle func(eventlog.Event, error) bool) (eventlog.Seq, bool) {
	// read hands handle the stored events after cur: how many, and false
	// when the follow ended.
	read := func(why string) (int, bool) {
		c.liveMetrics.reads.WithLabelValues(why).Inc()
		batch, lastErr := c.lg.NextBatch(ctx, f, cur, followStored)
		for i, e := range batch {
			var err error
			if i == len(batch)-1 {
				err = lastErr
			}
			if !handle(e, err) {
				return i + 1, false
			}
			cur = e.Seq
		}
		return len(batch), true
	}
	fallback := func(why string) (eventlog.Seq, bool) {
		c.liveMetrics.fallbacks.WithLabelValues(why).Inc()
		return cur, true
	}
	wait := c.livePoll
	live := false // whether a live event came
	for {
		pctx, cancel := context.WithTimeout(ctx, wait)
		ev, err := sub.Next(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			handle(eventlog.Event{}, ctx.Err())
			return cur, false
		case errors.Is(err, context.DeadlineExceeded):
			n, more := read("idle")
			if !more {
				return cur, false
			}
			if n == 0 {
				wait = min(2*wait, c.liveMaxPoll)
				continue
			}
			if !live {
				return fallback("unpublished")
			}
			wait = c.livePoll
			continue
		case errors.Is(err, nats.ErrSlowConsumer):
			// Messages were dropped: read what they held.
			if _, more := read("gap"); !more {
				return cur, false
			}
			continue
		case err != nil:
			return fallback("error")
		}
		live, wait = true, c.livePoll
		e := ev.Event
		if e.Seq <= cur {
			continue // read from the log already
		}
		if ev.Follows(cur) {
			if !handle(e, nil) {
				return cur, false
			}
			cur = e.Seq
			continue
		}
		// A gap: the chunks between are stored (e was stored after
		// them); read them, then take e unless the read passed it.
		for try := 0; ; try++ {
			n, more := read("gap")
			if !more {
				return cur, false
			}
			if cur >= e.Seq {
				break
			}
			if ev.Follows(cur) {
				if !handle(e, nil) {
					return cur, false
				}
				cur = e.Seq
				break
			}
			if n == 0 {
				if try >= fillTries {
					return fallback("gap")
				}
				t := time.NewTimer(fillWait)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					handle(eventlog.Event{}, ctx.Err())
					return cur, false
				}
			}
		}
	}
}
