package eventlog

import (
	"context"
	"fmt"
)

// Removals returns how many messages were ever removed from the log's
// streams of one kind (the chunks streams when chunks is set, else the
// events streams; every shard): the sum, over each stream, of its last
// sequence less the messages it holds. Every sequence a stream assigned
// is either stored or was removed since, so the sum grows with every
// purge and delete (a compaction, an agent's delete, chunk retention, a
// stream's age limit) and with nothing else: appends leave it as it is.
// A reader that finds it unchanged across its read of the streams of that
// kind read them with nothing removed in between (verify.Check does, on a
// live node that compacts while it reads). A stream made again starts
// from zero, so compare for equality, not order.
//
// Errors: ErrClosed, or a read error (ErrUnavailable when JetStream did
// not answer in time: a stream electing its leader).
func (l *Log) Removals(ctx context.Context, chunks bool) (uint64, error) {
	if l.closed() {
		return 0, ErrClosed
	}
	var n uint64
	for _, name := range l.streamNames(chunks) {
		if l.stream(name) == nil {
			return 0, fmt.Errorf("eventlog: removals: stream %s is not open", name)
		}
		// From the leader, asked again while none answers (a stream
		// electing its leader): askleader.go.
		info, err := l.streamInfo(ctx, name)
		if err != nil {
			return 0, readFailed("state of "+name, err)
		}
		n += info.State.LastSeq - info.State.Msgs
	}
	return n, nil
}
