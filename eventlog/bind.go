package eventlog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/internal/backoff"
)

// bindPatience bounds how long Open with Bind asks a stream's info again
// while JetStream cannot answer it for now: the stream electing a leader
// after a node's death, which takes nats-server up to about 10 s.
const bindPatience = 30 * time.Second

// bindAskTimeout is the wait for one answer to a stream's info.
const bindAskTimeout = 5 * time.Second

// bindStreams binds the existing streams. A log whose config says no
// shards learns them from the streams: when the unsharded events (or
// chunks) stream is missing and shard 0's exists, the log takes that
// stream's shard and partition counts (its metadata).
func (l *Log) bindStreams(ctx context.Context) error {
	if !l.sharded() {
		probe := l.cfg.EventsStream
		if l.cfg.ChunksOnly {
			probe = l.cfg.ChunksStream
		}
		if _, err := l.boundStream(ctx, probe); errors.Is(err, jetstream.ErrStreamNotFound) {
			if st, serr := l.boundStream(ctx, ShardStreamName(probe, 0)); serr == nil {
				md := st.CachedInfo().Config.Metadata
				k, _ := strconv.Atoi(md[metaShards])
				p, _ := strconv.Atoi(md[metaPartitions])
				if k < 1 || k > MaxShards || p < 1 || p%k != 0 {
					return fmt.Errorf("eventlog: bind stream %s: bad shard metadata %v", st.CachedInfo().Config.Name, md)
				}
				l.cfg.Shards, l.cfg.Partitions = k, p
			}
		}
	}
	l.newHandles()
	for _, chunk := range []bool{false, true} {
		if !chunk && l.cfg.ChunksOnly {
			continue // their handles stay without a stream: events reads are refused
		}
		for _, n := range l.streamNames(chunk) {
			st, err := l.boundStream(ctx, n)
			if err != nil {
				return fmt.Errorf("eventlog: bind stream %s (is agentd running?): %w", n, err)
			}
			l.handles[n].st = st
		}
	}
	return nil
}

// boundStream is the stream called name as JetStream describes it. A
// request that timed out or was answered "cluster unavailable" is asked
// again, pausing 100 ms doubling up to 2 s, until bindPatience or ctx
// ends (then the last error). Anything else, a missing stream or no
// responders (no JetStream serves this account: agentd is not running),
// is returned at once.
func (l *Log) boundStream(ctx context.Context, name string) (jetstream.Stream, error) {
	ctx, cancel := context.WithTimeout(ctx, bindPatience)
	defer cancel()
	var st jetstream.Stream
	err := backoff.Retry(ctx, 100*time.Millisecond, 2*time.Second, func(err error) bool {
		return bindAgain(err) && ctx.Err() == nil
	}, func() error {
		actx, cancel := context.WithTimeout(ctx, bindAskTimeout)
		defer cancel()
		var err error
		st, err = l.js.Stream(actx, name)
		return err
	})
	return st, err
}

// bindAgain reports whether a failed bind of a stream may be asked
// again: JetStream slow or electing (Transient), not absent. No
// responders is transient to a reader of a running log, but to a bind it
// means no JetStream serves this account.
func bindAgain(err error) bool {
	return Transient(err) && !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, jetstream.ErrNoStreamResponse)
}
