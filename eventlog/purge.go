package eventlog

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// PurgeChunks removes every stored chunk of one chat stream (JetStream's
// purge by subject, <prefix>.chunk.<agent>.<stream>). It is the primitive of
// chunk retention: the caller decides that the stream ended long enough ago
// (chat/chunk.Sweeper does), since a purge also removes the chunks of a
// stream still being written. Purging a stream with no chunks does nothing.
//
// Under an Owner the purge is refused with ErrNotOwner unless this process
// owns agent, and the fence forgets the stream's last sequence, so a later
// append to the stream (a retention marker) expects what the log holds after
// the purge instead of conflicting with the purged chunks.
//
// Errors: ErrInvalid (bad agent or stream), ErrNotOwner, ErrFenced,
// ErrClosed, or a transport error.
func (l *Log) PurgeChunks(ctx context.Context, agent, stream string) error {
	if !ValidToken(agent) || !ValidToken(stream) {
		return invalidf("purge chunks: %q/%q is not a valid agent and stream", agent, stream)
	}
	if l.closed() {
		return ErrClosed
	}
	var f *fence
	if l.cfg.Owner != nil {
		var err error
		if f, _, err = l.claim(agent); err != nil {
			return err
		}
	}
	// A view that applied these chunks keeps them across a crash: the
	// stream will not have them to apply again.
	if err := l.syncViews(ctx); err != nil {
		return err
	}
	subject := l.ChunksSubject(agent, stream)
	if err := l.resent(ctx, func(ctx context.Context) error {
		return l.stream(l.streamFor(agent, true)).Purge(ctx, jetstream.WithPurgeSubject(subject))
	}); err != nil {
		return fmt.Errorf("eventlog: purge %s: %w", subject, err)
	}
	if f != nil {
		f.mu.Lock()
		delete(f.mu.streams, stream)
		f.mu.Unlock()
	}
	return nil
}
