package chunk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/forever-agents/forever/eventlog"
)

// Batcher is the part of eventlog.Batcher a stream writer uses.
type Batcher interface {
	Add(ctx context.Context, e eventlog.Event, opts ...eventlog.AddOption) (*eventlog.Pending, error)
	Replace(p *eventlog.Pending, data json.RawMessage) (bool, error)
}

// mergeLimit bounds the JSON of a chunk that MergeDeltas grows.
const mergeLimit = 32 << 10

// WriterOption configures NewWriter.
type WriterOption func(*Writer)

// MergeDeltas makes the Writer fold a delta (text, reasoning or tool input)
// into the delta of the same block written just before it while that one
// still waits in the Batcher's queue, behind a batch being stored. A burst
// of deltas then costs one stored chunk, not one each; a delta written while
// nothing is queued is stored as it is, as soon as it would have been. The
// joined text is what a client gets either way (it concatenates deltas), so
// only the chunk boundaries change: use it where nothing counts on one
// chunk per delta. A merged delta takes no chunk index (Written).
func MergeDeltas() WriterOption { return func(w *Writer) { w.merge = true } }

// PackChunks makes the Writer store the chunks written while the record
// before them still waits in the Batcher's queue (behind a batch being
// stored) in that record: a packed record (EventChunks) of several chunks,
// one message and one fsync where EventChunk events cost one each. A
// chunk written while nothing is queued starts a record of its own, sent
// as soon as an EventChunk would have been; a chunk over the max payload
// is split into EventPart events as without it, and a record never grows
// past the max payload. Each chunk keeps its index. Only a reader that
// knows EventChunks reads such a stream: in a cluster, use it once every
// node reads them (agentd's FormatChunkBatches).
func PackChunks() WriterOption { return func(w *Writer) { w.pack = true } }

// Writer publishes the chunks of one chat stream through a shared
// Batcher. Write queues a chunk (durable later, in a group commit); Flush
// returns once every chunk written so far is durable. Each chunk's event id
// is <stream>/<index>, so a retried batch is deduplicated. Each chunk is
// chained behind the one written before it (eventlog.After), so what is
// stored is always a prefix of what was written: a chunk that fails takes
// the chunks queued behind it down with it, never leaving a gap.
//
// A Writer is safe for concurrent use, but chunks are ordered only per
// calling goroutine; a turn writes from one goroutine.
type Writer struct {
	b             Batcher
	agent, stream string
	limit         int
	merge         bool     // MergeDeltas
	pack          bool     // PackChunks
	live          *livePub // PublishLive; nil without

	mu struct {
		sync.Mutex
		next int                 // index of the next chunk
		last *eventlog.Pending   // last event known stored
		out  []*eventlog.Pending // queued events not yet known stored, in order
		tail *eventlog.Pending   // last event queued: the next is chained behind it
		// tailDelta is the chunk of tail (with PackChunks, tail's last
		// chunk) when it is a delta MergeDeltas may grow; nil otherwise.
		tailDelta *Chunk
		// tailPack is what tail holds when it is a packed record
		// (PackChunks) that may still grow; nil otherwise.
		tailPack *packRec
		err      error // first failure; the stream is broken after it
	}
}

// NewWriter returns a writer for agent's stream, starting at chunk
// index next (0 for a new stream, the stored count when continuing one).
// maxPayload is the server's max payload; larger chunks are split.
func NewWriter(b Batcher, agent, stream string, next int, maxPayload int64, opts ...WriterOption) *Writer {
	w := &Writer{b: b, agent: agent, stream: stream, limit: int(maxPayload) - 1024}
	w.mu.next = next
	for _, o := range opts {
		o(w)
	}
	if w.live != nil {
		// A new stream: its first event has none before it.
		w.live.known = next == 0
	}
	return w
}

// Stream returns the stream id.
func (w *Writer) Stream() string { return w.stream }

// Write queues c. A chunk larger than the server's max payload is stored as
// several parts that readers join; nothing is dropped.
func (w *Writer) Write(ctx context.Context, c Chunk) error {
	// MarshalJSON directly: json.Marshal would reach it through reflection
	// and then scan its output again to compact it, 6x the cost per chunk.
	body, err := c.MarshalJSON()
	if err != nil {
		return fmt.Errorf("chunk: encode chunk: %w", err)
	}
	w.mu.Lock()
	w.pruneLocked()
	if w.mu.err != nil {
		err := w.mu.err
		w.mu.Unlock()
		return err
	}
	if w.merge && w.mergeLocked(c) {
		w.mu.Unlock()
		return nil
	}
	var delta *Chunk
	if w.merge && isDelta(c.Type) {
		// A copy of its own, so that c, taken by value, stays on the
		// stack for every other chunk (a heap Chunk per Write was a
		// tenth of a tool turn's allocations).
		d := c
		delta = &d
	}
	if w.pack && len(body) <= w.limit && w.packLocked(body, delta) {
		w.mu.Unlock()
		return nil
	}
	index := w.mu.next
	w.mu.next++
	w.mu.Unlock()
	if len(body) <= w.limit {
		// The common case: one event, id <stream>/<index>.
		id := w.stream + "/" + strconv.Itoa(index)
		if w.pack {
			rec := &packRec{first: index, bodies: [][]byte{body}}
			return w.add(ctx, index, eventlog.Event{Agent: w.agent, Stream: w.stream, Type: EventChunks, ID: id, Data: encodePacked(index, rec.bodies)}, delta, rec)
		}
		return w.add(ctx, index, eventlog.Event{Agent: w.agent, Stream: w.stream, Type: EventChunk, ID: id, Data: body}, delta, nil)
	}
	bodies, err := split(body, index, w.limit)
	if err != nil {
		return err
	}
	for k, b := range bodies {
		id := fmt.Sprintf("%s/%d.%d", w.stream, index, k)
		if err := w.add(ctx, index, eventlog.Event{Agent: w.agent, Stream: w.stream, Type: EventPart, ID: id, Data: b}, nil, nil); err != nil {
			return err
		}
	}
	return nil
}

// packRec is a packed record being filled (PackChunks): the index of its
// first chunk and each chunk's JSON. Its slices are replaced, never
// changed in place, so a failed Replace leaves it as stored.
type packRec struct {
	first  int
	bodies [][]byte
}

// packLocked appends body, the next chunk, to the packed record queued
// last, and reports whether it did: that record is still in the Batcher's
// queue and stays within the max payload. delta is the chunk when
// MergeDeltas may grow it.
// REQUIRES: w.mu held.
func (w *Writer) packLocked(body []byte, delta *Chunk) bool {
	rec := w.mu.tailPack
	if rec == nil {
		return false
	}
	bodies := append(rec.bodies[:len(rec.bodies):len(rec.bodies)], body)
	if !w.replaceTailLocked(rec, bodies) {
		return false
	}
	w.mu.next++
	w.mu.tailDelta = delta
	return true
}

// replaceTailLocked makes the packed record queued last (rec) hold bodies
// instead, and reports whether it could: the record is still in the
// Batcher's queue and bodies fit the max payload. Once it could not, the
// record is sealed for the Writer too.
// REQUIRES: w.mu held.
func (w *Writer) replaceTailLocked(rec *packRec, bodies [][]byte) bool {
	select {
	case <-w.mu.tail.Done():
		w.mu.tailPack = nil
		return false
	default:
	}
	data := encodePacked(rec.first, bodies)
	if len(data) > w.limit {
		w.mu.tailPack = nil
		return false
	}
	if ok, err := w.b.Replace(w.mu.tail, data); !ok || err != nil {
		// Taken into a batch already (or refused): the chunk starts a
		// record of its own, and shows the error, if any, the usual way.
		w.mu.tailPack = nil
		return false
	}
	rec.bodies = bodies
	return true
}

// mergeLocked folds c into the queued delta before it (MergeDeltas) and
// reports whether it did: c is a delta of the same type and block as the
// last chunk queued, that one is still in the Batcher's queue, and the
// joined chunk stays small.
// REQUIRES: w.mu held.
func (w *Writer) mergeLocked(c Chunk) bool {
	d := w.mu.tailDelta
	if d == nil || d.Type != c.Type || d.ID != c.ID || d.ToolCallID != c.ToolCallID {
		return false
	}
	select {
	case <-w.mu.tail.Done():
		return false
	default:
	}
	joined := *d
	joined.Delta += c.Delta
	joined.InputTextDelta += c.InputTextDelta
	body, err := joined.MarshalJSON()
	if err != nil || len(body) > min(w.limit, mergeLimit) {
		return false
	}
	if rec := w.mu.tailPack; rec != nil {
		// The delta is the packed record's last chunk.
		bodies := append(rec.bodies[:len(rec.bodies)-1:len(rec.bodies)-1], body)
		if !w.replaceTailLocked(rec, bodies) {
			w.mu.tailDelta = nil
			return false
		}
	} else if ok, err := w.b.Replace(w.mu.tail, body); !ok || err != nil {
		// Taken into a batch already (or refused): c goes as a chunk of
		// its own, and shows the error, if any, the usual way.
		w.mu.tailDelta = nil
		return false
	}
	// In place: the tail delta is this Writer's own copy (Write), read
	// only under w.mu, so joined stays on the stack.
	*d = joined
	return true
}

// isDelta reports whether chunks of type t are deltas that MergeDeltas joins.
func isDelta(t string) bool {
	return t == TextDelta || t == ReasoningDelta || t == ToolInputDelta
}

// add queues one event of chunk index, chained behind the event queued
// before it (eventlog.After): if that one is not stored, neither is this,
// so the stream's stored chunks never have a gap. delta is the chunk when it
// is one MergeDeltas may grow; rec what e holds when it is a packed record
// (PackChunks).
func (w *Writer) add(ctx context.Context, index int, e eventlog.Event, delta *Chunk, rec *packRec) error {
	w.mu.Lock()
	tail := w.mu.tail
	w.mu.Unlock()
	opts := []eventlog.AddOption{eventlog.After(tail)}
	if w.live != nil {
		opts = append(opts, eventlog.OnDone(w.live.done))
	}
	p, err := w.b.Add(ctx, e, opts...)
	if err != nil {
		return w.fail(fmt.Errorf("chunk: write chunk %d of %s: %w", index, w.stream, err))
	}
	w.mu.Lock()
	w.mu.out = append(w.mu.out, p)
	w.mu.tail, w.mu.tailDelta, w.mu.tailPack = p, delta, rec
	w.mu.Unlock()
	return nil
}

func (w *Writer) fail(err error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.err == nil {
		w.mu.err = err
	}
	return err
}

// pruneLocked drops stored events from the front of the queue and records
// the first failure, so a later batch's success never hides an earlier loss.
// REQUIRES: w.mu held.
func (w *Writer) pruneLocked() {
	for len(w.mu.out) > 0 {
		p := w.mu.out[0]
		select {
		case <-p.Done():
		default:
			return
		}
		// A duplicate was stored before: a retried publish.
		if _, err := p.Wait(context.Background()); err != nil && !errors.Is(err, eventlog.ErrDuplicate) && w.mu.err == nil {
			w.mu.err = fmt.Errorf("chunk: chunk of %s not stored: %w", w.stream, err)
		}
		w.mu.last = p
		w.mu.out = w.mu.out[1:]
	}
}

// Flush returns once every chunk written before it is durable, with the
// sequence of the last one (0 if none was written). If any chunk failed to
// store, Flush returns that error and the stream accepts no more writes.
func (w *Writer) Flush(ctx context.Context) (eventlog.Seq, error) {
	w.mu.Lock()
	out := append([]*eventlog.Pending(nil), w.mu.out...)
	last := w.mu.last
	w.mu.Unlock()
	for _, p := range out {
		select {
		case <-p.Done():
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	w.mu.Lock()
	w.pruneLocked()
	err := w.mu.err
	if len(out) > 0 {
		last = out[len(out)-1]
	}
	w.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if last == nil {
		return 0, nil
	}
	seq, err := last.Wait(ctx)
	if errors.Is(err, eventlog.ErrDuplicate) {
		err = nil
	}
	return seq, err
}

// Written returns the number of chunks written: the index the next one
// gets. A delta merged into the one before it (MergeDeltas) takes none.
func (w *Writer) Written() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.next
}
