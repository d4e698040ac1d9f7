package chat

import (
	"context"
	"errors"
	"fmt"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
)

// loadTurnStream reads the stored chunks of info's stream back. When the
// streams view knows the stream began before the first chunk still stored
// (chunk retention removed its start), it returns ErrChunksExpired and a
// builder holding nothing but the chunk count, so chunks written after it
// keep their indexes.
func (a *Agent) loadTurnStream(ctx context.Context, info TurnInfo) (*builder, error) {
	b, first, err := readStreamInto(ctx, a.log, a.blobGetter(), a.agent, info.StreamID, turnBuilder(info))
	if err != nil {
		return nil, err
	}
	last, err := a.log.LastSeq(ctx, eventlog.Filter{Agent: a.agent, Stream: info.StreamID})
	if err != nil {
		return nil, err
	}
	if err := a.store.WaitForChunks(ctx, last); err != nil {
		return nil, err
	}
	meta, err := a.store.Streams().Get(a.agent, info.StreamID)
	if errors.Is(err, chunk.ErrUnknownStream) {
		return b, nil // nothing was ever stored
	}
	if err != nil {
		return nil, err
	}
	if meta.FirstSeq > 0 && first != meta.FirstSeq {
		gone := newBuilder()
		gone.chunks = max(meta.Chunks, b.chunks)
		return gone, fmt.Errorf("%w: stream %s began at %d, its first stored chunk is at %d (0: none)", ErrChunksExpired, info.StreamID, meta.FirstSeq, first)
	}
	return b, nil
}

// failExpired ends a turn whose stream's chunks expired: an error chunk
// saying so (clients resuming see it) and turn.failed. The assistant
// message is left as it is: the partial answer is gone, and storing what
// remains would truncate it.
func (st *turnRun) failExpired(ctx context.Context, cause error) error {
	a := st.a
	a.logger.Warn("turn failed", "request", st.info.RequestID, "err", cause)
	em := a.newEmitter(st.info.StreamID, st.b)
	err := em.emit(ctx, chunk.Chunk{Type: chunk.Error, ErrorText: cause.Error()})
	if err == nil {
		_, err = em.w.Flush(ctx)
	}
	if err != nil {
		// The outcome below matters more than the chunk.
		a.logger.Warn("error chunk of an expired stream not stored", "request", st.info.RequestID, "err", err)
	}
	if _, err := a.append(ctx, EventTurnFailed, turnEnded{RequestID: st.info.RequestID, Error: cause.Error()}); err != nil {
		return err
	}
	a.metrics.turns.WithLabelValues("failed").Inc()
	return nil
}
