package main

import (
	"context"
	"sync/atomic"

	"github.com/forever-agents/forever/eventlog"
)

// writeCounter is the rig's Log as its agents and fibers write through
// it, counting the writes they wait for: each Append, AppendAll and
// AppendBatch is one round trip to the events stream (the chunks go
// through the Batcher, not counted here). Everything else is the Log's.
type writeCounter struct {
	*eventlog.Log
	n atomic.Int64
}

// Append counts one awaited write.
func (w *writeCounter) Append(ctx context.Context, e eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	w.n.Add(1)
	return w.Log.Append(ctx, e, opts...)
}

// AppendAll counts one awaited write (one chain).
func (w *writeCounter) AppendAll(ctx context.Context, evs []eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	w.n.Add(1)
	return w.Log.AppendAll(ctx, evs, opts...)
}

// AppendBatch counts one awaited write (one atomic batch).
func (w *writeCounter) AppendBatch(ctx context.Context, evs []eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	w.n.Add(1)
	return w.Log.AppendBatch(ctx, evs, opts...)
}
