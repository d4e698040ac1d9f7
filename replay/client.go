package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/forever-agents/forever/blob"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
)

// Item is one chunk of a followed stream and its cursor: resume after
// Cursor to get the chunks that follow it.
type Item struct {
	Cursor Cursor
	Chunk  chunk.Chunk
}

// Client follows chat streams in the log. It reads only, so it works on a
// Log opened with eventlog.Config{Bind: true} (a client process) as well as
// on the server's own Log. A Client is safe for concurrent use.
type Client struct {
	lg    *eventlog.Log
	blobs chunk.Getter
	// live and liveMetrics: WithLive; nil without.
	live                  *chunk.Live
	liveMetrics           *liveMetrics
	livePoll, liveMaxPoll time.Duration
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithBlobs makes a Client read back the payloads chunks hold by reference
// (chunk.Blobs) through g, the FOREVER_BLOBS bucket (*blob.Store, or
// blob.NewReader for a client process): Follow then yields each chunk as
// it was written. Without it, such a chunk is yielded as stored: its
// field empty and Chunk.Blobs naming the object.
func WithBlobs(g chunk.Getter) ClientOption {
	return func(c *Client) { c.blobs = g }
}

// NewClient returns a Client reading lg. The caller keeps ownership of lg.
func NewClient(lg *eventlog.Log, opts ...ClientOption) *Client {
	c := &Client{lg: lg}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Follow yields every chunk of agent's stream stored after the cursor, once
// each and in order: first the stored ones, then live ones as they are
// written (the stored ones with batched direct gets, the rest through one
// ordered consumer from the last one read), so nothing is lost or doubled
// between history and live. Chunks split into parts are joined. It ends
// after the terminal chunk (finish, error, abort), when ctx is done
// (yielding ctx's error), or when the caller stops ranging.
//
// Following a stream that has ended replays the chunks after the cursor and
// ends; with a cursor at or past its terminal chunk it yields nothing. A
// stream with no chunk stored is ErrUnknownStream. A stream whose chunks
// retention purged (its chunk.EventExpired marker), or, from cursor 0, one
// whose first chunks are gone, yields an error wrapping chunk.ErrExpired
// and ends. A chunk that cannot be decoded, or whose payload stored by
// reference cannot be read back (WithBlobs), is yielded as an error, and
// ranging may go on past it.
func (c *Client) Follow(ctx context.Context, agent, stream string, after Cursor) iter.Seq2[Item, error] {
	return c.follow(ctx, agent, stream, after, true)
}

// FollowTurn is Follow for a turn that was just started: a stream with no
// chunk stored yet is waited for instead of being ErrUnknownStream. Use it
// with the stream id and cursor a chat command replied.
func (c *Client) FollowTurn(ctx context.Context, agent, stream string, after Cursor) iter.Seq2[Item, error] {
	return c.follow(ctx, agent, stream, after, false)
}

// CheckFollow reports whether a Follow of agent's stream can start now:
// an error wrapping eventlog.ErrConsumerLimit when no consumer can be
// created for it (eventlog.Log.CheckFollow). An empty stream stands for
// the turn about to start.
func (c *Client) CheckFollow(ctx context.Context, agent, stream string) error {
	return c.lg.CheckFollow(ctx, eventlog.Filter{Agent: agent, Stream: stream, Chunks: true})
}

// A gateway's follow (followOn) that failed for a moment (the consumer not
// created within the JetStream API's timeout on a busy server, a stream
// leader moving) follows again from the last chunk it yielded, at most
// followRetries times, followRetryWait apart, so the client's stream does
// not end without its terminal chunk for a hiccup of the server.
const (
	followRetries   = 3
	followRetryWait = 250 * time.Millisecond
)

// followOn is follow, followed again after a transient error (see
// followRetries): an error for good (a 4xx: no such stream, chunks
// expired, too many consumers), a chunk that cannot be read (yielded, and
// ranging goes on) or ctx's end is yielded as follow yields it.
func (c *Client) followOn(ctx context.Context, agent, stream string, after Cursor, mustExist bool) iter.Seq2[Item, error] {
	return func(yield func(Item, error) bool) {
		for attempt := 0; ; attempt++ {
			again := false
			for it, err := range c.follow(ctx, agent, stream, after, mustExist) {
				if err != nil && attempt < followRetries && ctx.Err() == nil && transientFollow(err) {
					again = true
					break
				}
				if err == nil {
					after = it.Cursor
				}
				if !yield(it, err) {
					return
				}
			}
			if !again {
				return
			}
			t := time.NewTimer(followRetryWait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				yield(Item{}, ctx.Err())
				return
			}
		}
	}
}

// followStored is how many stored chunks a follow reads with batched
// direct gets before it creates a consumer for the rest: a turn stored to
// its terminal chunk by then (a short answer, a resume of an ended turn)
// is followed with none.
const followStored = 256

// transientFollow reports whether a follow's error may pass when it is
// followed again: not a chunk that cannot be read (ranging goes on past
// it), not a refusal for good (apiError's 4xx).
func transientFollow(err error) bool {
	var ce *eventlog.CorruptError
	if errors.As(err, &ce) || lostPayload(err) || errors.Is(err, eventlog.ErrConsumerLimit) {
		return false
	}
	return apiError(err).Code >= 500
}

// follow is Follow; without mustExist a stream with no chunk yet is
// awaited (a turn that was just started).
func (c *Client) follow(ctx context.Context, agent, stream string, after Cursor, mustExist bool) iter.Seq2[Item, error] {
	return func(yield func(Item, error) bool) {
		f := eventlog.Filter{Agent: agent, Stream: stream}
		// The chunks stored after the cursor come from batched direct gets
		// (up to followStored), so a resuming client sees them without
		// waiting for a consumer to be created, and a stream stored to its
		// terminal chunk is followed with no consumer at all; the ordered
		// consumer otherwise starts right after the last one read.
		// After a cursor inside a packed record, the record itself comes
		// first, less its chunks up to the cursor's.
		skipK, inside := after.Inside()
		from := after.Seq()
		if inside && from > 0 {
			from--
		}
		// With WithLive, the live chunks are subscribed to before the
		// stored ones are read, so each chunk stored after the read is
		// published to the subscription (or shows a gap that a read
		// fills); a failed subscription leaves the follow to a consumer.
		var sub *chunk.LiveSub
		if c.live != nil {
			if s, err := c.live.Subscribe(ctx, agent, stream); err == nil {
				sub = s
				defer sub.Close()
			}
		}
		batch, lastErr := c.lg.NextBatch(ctx, f, from, followStored)
		if lastErr != nil && len(batch) == 0 {
			yield(Item{}, fmt.Errorf("replay: follow %s/%s: %w", agent, stream, lastErr))
			return
		}
		var first eventlog.Event
		var err error // first's: a batch's error is its last event's
		found := len(batch) > 0
		if found {
			first = batch[0]
			if len(batch) == 1 {
				err = lastErr
			}
		}
		if found && err == nil {
			if err := expired(first, after); err != nil {
				yield(Item{}, err)
				return
			}
		}
		if !found {
			// Nothing stored after the cursor: an unknown stream is an
			// error, an ended one ends now instead of waiting for chunks
			// that never come.
			// Chunks written since Next are followed below; only a last
			// chunk at or before the cursor can say the stream ended with
			// nothing more to show.
			last, stored, err := c.lg.Last(ctx, f)
			atCursor := stored && CursorAt(last.Seq).Compare(after) <= 0
			if err != nil && (!stored || atCursor) {
				yield(Item{}, fmt.Errorf("replay: last chunk of %s/%s: %w", agent, stream, err))
				return
			}
			if stored && last.Type == chunk.EventExpired {
				yield(Item{}, fmt.Errorf("%w: %s/%s was purged by retention", chunk.ErrExpired, agent, stream))
				return
			}
			if !stored && mustExist {
				yield(Item{}, fmt.Errorf("%w: %s/%s has no chunks", ErrUnknownStream, agent, stream))
				return
			}
			if atCursor {
				ended, err := c.ended(ctx, f, last)
				if err != nil {
					yield(Item{}, err)
					return
				}
				if ended {
					return
				}
			}
		}
		var a chunk.Assembler
		aligned := false // whether a whole chunk's first event was seen
		// handle yields what e completes; false ends the follow.
		handle := func(e eventlog.Event, err error) bool {
			if err != nil {
				return yield(Item{}, err)
			}
			if !aligned {
				// A cursor inside a split chunk: skip to the next chunk.
				if part, split := chunk.SplitPart(e.Type, e.Data); split && part != 0 {
					return true
				}
				aligned = true
			}
			chs, err := a.Chunks(e.Type, e.Data)
			if errors.Is(err, chunk.ErrExpired) {
				yield(Item{}, fmt.Errorf("replay: %s/%s at %d: %w", agent, stream, e.Seq, err))
				return false
			}
			if err != nil {
				return yield(Item{}, fmt.Errorf("replay: %s/%s at %d: %w", agent, stream, e.Seq, err))
			}
			for k, ch := range chs {
				if inside && e.Seq == after.Seq() && k <= skipK {
					// Seen before the cursor; a terminal one ended the
					// stream there.
					if ch.Terminal() {
						return false
					}
					continue
				}
				if ch.Blobs != nil && c.blobs != nil {
					var err error
					if ch, err = chunk.Resolve(ctx, c.blobs, ch); err != nil {
						if !yield(Item{}, fmt.Errorf("replay: %s/%s at %d: %w", agent, stream, e.Seq, err)) {
							return false
						}
						continue
					}
				}
				cur := CursorAt(e.Seq)
				if k < len(chs)-1 {
					cur = CursorIn(e.Seq, k)
				}
				if !yield(Item{Cursor: cur, Chunk: ch}, nil) || ch.Terminal() {
					return false
				}
			}
			return true
		}
		from = after.Seq()
		for i, e := range batch {
			var eerr error
			if i == len(batch)-1 {
				eerr = lastErr
			}
			if !handle(e, eerr) {
				return // the terminal chunk was stored: no consumer
			}
			from = e.Seq
		}
		if sub != nil {
			var more bool
			if from, more = c.followLive(ctx, f, sub, from, handle); !more {
				return
			}
			sub.Close() // the consumer goes on
		}
		for e, err := range c.lg.Follow(ctx, f, from) {
			if !handle(e, err) {
				return
			}
		}
	}
}

// expired returns an error wrapping chunk.ErrExpired when first, the first
// event stored after the cursor, shows that the stream lost chunks a follow
// after the cursor needs: retention's marker, or, for a follow from the
// start, a first chunk that is not the stream's chunk 0. (A follow from a
// later cursor cannot tell from the log alone; the gateway checks it
// against the streams view.)
func expired(first eventlog.Event, after Cursor) error {
	if first.Type == chunk.EventExpired {
		return fmt.Errorf("%w: %s/%s was purged by retention", chunk.ErrExpired, first.Agent, first.Stream)
	}
	if after.IsZero() {
		if i, ok := chunk.IndexOf(first); ok && i > 0 {
			return fmt.Errorf("%w: %s/%s: its first stored chunk is chunk %d", chunk.ErrExpired, first.Agent, first.Stream, i)
		}
	}
	return nil
}

// ended reports whether last, the stream's last event, ends the stream.
func (c *Client) ended(ctx context.Context, f eventlog.Filter, last eventlog.Event) (bool, error) {
	if _, split := chunk.SplitPart(last.Type, last.Data); split {
		// Rare: a split last chunk. Join it from the stream's start.
		evs, err := c.lg.Read(ctx, f, 0, 0)
		if err != nil {
			return false, fmt.Errorf("replay: read %s/%s: %w", f.Agent, f.Stream, err)
		}
		var a chunk.Assembler
		var lastChunk chunk.Chunk
		for _, e := range evs {
			if chs, err := a.Chunks(e.Type, e.Data); err == nil && len(chs) > 0 {
				lastChunk = chs[len(chs)-1]
			}
		}
		return lastChunk.Terminal(), nil
	}
	if last.Type == chunk.EventChunks {
		var a chunk.Assembler
		chs, err := a.Chunks(last.Type, last.Data)
		if err != nil {
			return false, nil
		}
		return chs[len(chs)-1].Terminal(), nil
	}
	var ch struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(last.Data, &ch) != nil {
		return false, nil
	}
	return chunk.Chunk{Type: ch.Type}.Terminal(), nil
}

// Latest returns the id of agent's most recently written stream, from the
// log alone (no projection): the stream of the agent's last chunk. An agent
// without chunks is ErrUnknownStream.
func (c *Client) Latest(ctx context.Context, agent string) (string, error) {
	last, ok, err := c.lg.Last(ctx, eventlog.Filter{Agent: agent, Chunks: true})
	if err != nil {
		return "", fmt.Errorf("replay: latest stream of %s: %w", agent, err)
	}
	if !ok {
		return "", fmt.Errorf("%w: agent %s has no stream", ErrUnknownStream, agent)
	}
	if last.Stream == "" {
		return "", errors.New("replay: latest stream of " + agent + ": last chunk has no stream")
	}
	return last.Stream, nil
}

// lostPayload reports whether err is a chunk's payload stored by reference
// that could not be read back because its object is gone or does not match
// (verify reports both): the gateway skips that chunk, as a corrupt one,
// rather than end the stream for a client that would resume into it again.
func lostPayload(err error) bool {
	return errors.Is(err, blob.ErrNotFound) || errors.Is(err, blob.ErrMismatch)
}
