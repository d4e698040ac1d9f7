package chunk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/jsonstr"
)

// Stream statuses.
const (
	StatusStreaming = "streaming"
	StatusCompleted = "completed"
	StatusError     = "error"
	StatusAborted   = "aborted"
)

// StreamInfo is the metadata of one chat stream, projected from its chunks.
type StreamInfo struct {
	Agent     string       `json:"agent"`
	Stream    string       `json:"stream"`
	RequestID string       `json:"requestId,omitempty"`
	MessageID string       `json:"messageId,omitempty"`
	Status    string       `json:"status"`
	Error     string       `json:"error,omitempty"`
	FirstSeq  eventlog.Seq `json:"firstSeq"`
	LastSeq   eventlog.Seq `json:"lastSeq"`
	Chunks    int          `json:"chunks"`
	StartedAt time.Time    `json:"startedAt"`
	UpdatedAt time.Time    `json:"updatedAt"`
	// Expired is set once chunk retention purged the stream's chunks (its
	// EventExpired marker): the metadata stays, the chunks are gone, and a
	// resume is answered ErrExpired. ExpiredAt is when that happened.
	Expired   bool      `json:"expired,omitempty"`
	ExpiredAt time.Time `json:"expiredAt,omitzero"`
}

// Done reports whether the stream has ended.
func (s StreamInfo) Done() bool { return s.Status != StatusStreaming }

// ErrExpired is returned by Assembler.Add for a stream's EventExpired
// marker, and by readers (replay) for a stream whose chunks retention
// removed, wholly or from its start.
var ErrExpired = errors.New("chunk: chunks expired")

// StreamsProjectionName is the name of the stream metadata projection.
const StreamsProjectionName = "streams"

func streamKey(agent, stream string) []byte { return []byte("s/" + agent + "/" + stream) }
func latestKey(agent string) []byte         { return []byte("l/" + agent) }

// endedPrefix is the index of ended, unexpired streams by the time they
// ended: e/<UpdatedAt as 16 hex digits of Unix nanoseconds>/<agent>/<stream>,
// holding {agent, stream}. Retention scans it oldest first.
const endedPrefix = "e/"

// endedKey returns info's key in the ended index, nil when it does not
// belong there (streaming, or already expired).
func endedKey(info StreamInfo) []byte {
	if !info.Done() || info.Expired {
		return nil
	}
	return []byte(endedPrefix + endedTime(info.UpdatedAt) + "/" + info.Agent + "/" + info.Stream)
}

func endedTime(t time.Time) string { return fmt.Sprintf("%016x", uint64(max(t.UnixNano(), 0))) }

type endedRef struct {
	Agent  string `json:"agent"`
	Stream string `json:"stream"`
}

// StreamsProjection returns the projection of stream metadata: one row per
// stream (status, request id, first and last sequence, chunk count, expiry),
// the latest stream of each agent, and the index of ended streams by end
// time that retention reads (Streams.Ended). It follows every chunk as it
// is stored, but a view built from nothing is bootstrapped from each
// stream's first and last stored event (see bootstrapStreams), not
// replayed: Apply takes a chunk at or before a row's LastSeq as applied.
func StreamsProjection() eventlog.Projection {
	return eventlog.Projection{
		Name: StreamsProjectionName,
		// 2: the ended index and expiry.
		Version:   2,
		Filter:    eventlog.Filter{Chunks: true},
		Apply:     applyStream,
		Bootstrap: bootstrapStreams,
	}
}

func applyStream(b *eventlog.Batch, e eventlog.Event) error {
	key := streamKey(e.Agent, e.Stream)
	var info StreamInfo
	found, err := getJSON(b, key, &info)
	if err != nil {
		return err
	}
	if found && e.Seq <= info.LastSeq {
		// Already in the row: a bootstrapped view read past its cursor.
		return nil
	}
	if e.Type == EventExpired {
		return applyExpired(b, e, info, found)
	}
	if e.Type == eventlog.TypeDeleted {
		return applyDeleted(b, e)
	}
	var oldEnded []byte
	if found {
		oldEnded = endedKey(info)
	}
	if !found {
		info = StreamInfo{Agent: e.Agent, Stream: e.Stream, Status: StatusStreaming, FirstSeq: e.Seq, StartedAt: e.Time}
		if err := b.Set(latestKey(e.Agent), []byte(e.Stream)); err != nil {
			return err
		}
	}
	info.LastSeq, info.UpdatedAt = e.Seq, e.Time
	switch e.Type {
	case EventChunk:
		info.Chunks++
		if !mayTell(e.Data) {
			break
		}
		c, err := decode(e.Data)
		if err != nil {
			break // counted; a chunk that does not decode carries no status
		}
		info.see(c)
	case EventChunks:
		_, bodies, err := unpack(e.Data)
		if err != nil {
			break // a record that does not decode is no chunk
		}
		info.Chunks += len(bodies)
		for _, b := range bodies {
			if !mayTell(b) {
				continue
			}
			if c, err := decode(b); err == nil {
				info.see(c)
			}
		}
	case EventPart:
		var p chunkPart
		if json.Unmarshal(e.Data, &p) == nil && p.Part == p.Parts-1 {
			info.Chunks++
		}
	}
	if err := reindexEnded(b, oldEnded, info); err != nil {
		return err
	}
	return setJSON(b, key, info)
}

// mayTell reports whether a stored chunk's JSON may tell see anything:
// false only for one in MarshalJSON's form (its type first, unescaped)
// whose type is none that see reads, such as a delta. Most of a stream's
// chunks are deltas, and decoding each one only to drop it was a fifth
// of the streams view's allocations.
func mayTell(body []byte) bool {
	rest, ok := jsonstr.Cut(body, `{"type":"`)
	if !ok {
		return true
	}
	end := bytes.IndexByte(rest, '"')
	if end < 0 || bytes.IndexByte(rest[:end], '\\') >= 0 {
		return true
	}
	switch string(rest[:end]) {
	case Start, Finish, Error, Abort:
		return true
	}
	return false
}

// see takes what a stored chunk tells of its stream: the ids of its start,
// the status and error of its end.
func (s *StreamInfo) see(c Chunk) {
	if c.Type == Start {
		s.MessageID, s.RequestID = c.MessageID, c.RequestID
	}
	if st := c.EndStatus(); st != "" {
		s.Status = st
	}
	if c.Type == Error {
		s.Error = c.ErrorText
	}
}

// reindexEnded moves info's entry in the ended index from old (nil: none).
func reindexEnded(b *eventlog.Batch, old []byte, info StreamInfo) error {
	cur := endedKey(info)
	if old != nil && string(old) != string(cur) {
		if err := b.Delete(old); err != nil {
			return err
		}
	}
	if cur == nil || string(old) == string(cur) {
		return nil
	}
	return setJSON(b, cur, endedRef{Agent: info.Agent, Stream: info.Stream})
}

// applyExpired marks a stream expired. The marker holds the stream's
// metadata as it was when its chunks were purged, so a view rebuilt after
// the purge (which finds the marker alone) gets the same row.
func applyExpired(b *eventlog.Batch, e eventlog.Event, info StreamInfo, found bool) error {
	if found {
		if old := endedKey(info); old != nil {
			if err := b.Delete(old); err != nil {
				return err
			}
		}
	} else {
		if json.Unmarshal(e.Data, &info) != nil {
			info = StreamInfo{} // a marker that does not decode still marks the stream
		}
		if gone, err := deletedBefore(b, e.Agent, info.FirstSeq); err != nil || gone {
			return err // a stream of the agent's life before its deletion
		}
		info.Agent, info.Stream = e.Agent, e.Stream
		if info.Status == "" {
			info.Status = StatusCompleted
		}
		if err := setLatestIfNewer(b, info); err != nil {
			return err
		}
	}
	info.Expired, info.ExpiredAt = true, e.Time
	return setJSON(b, streamKey(e.Agent, e.Stream), info)
}

// setLatestIfNewer makes info the agent's latest stream unless the latest
// known one started later (markers of a rebuilt view come in purge order).
func setLatestIfNewer(b *eventlog.Batch, info StreamInfo) error {
	cur, err := b.Get(latestKey(info.Agent))
	switch {
	case errors.Is(err, eventlog.ErrNotFound):
	case err != nil:
		return err
	default:
		var latest StreamInfo
		found, err := getJSON(b, streamKey(info.Agent, string(cur)), &latest)
		if err != nil {
			return err
		}
		if found && latest.StartedAt.After(info.StartedAt) {
			return nil
		}
	}
	return b.Set(latestKey(info.Agent), []byte(info.Stream))
}

// Streams reads the stream metadata projection.
type Streams struct{ v *eventlog.View }

// ErrUnknownStream is returned by Streams.Get and Streams.Latest for a
// stream (or agent) with no chunks.
var ErrUnknownStream = errors.New("chunk: unknown stream")

// NewStreams reads the projection through v (lg.View(StreamsProjectionName)).
func NewStreams(v *eventlog.View) *Streams { return &Streams{v: v} }

// Get returns one stream's metadata, or ErrUnknownStream.
func (s *Streams) Get(agent, stream string) (StreamInfo, error) {
	var info StreamInfo
	found, err := getJSON(s.v, streamKey(agent, stream), &info)
	if err != nil {
		return StreamInfo{}, err
	}
	if !found {
		return StreamInfo{}, fmt.Errorf("%w: %s/%s", ErrUnknownStream, agent, stream)
	}
	return info, nil
}

// Latest returns the agent's most recently started stream, or
// ErrUnknownStream.
func (s *Streams) Latest(agent string) (StreamInfo, error) {
	id, err := s.v.Get(latestKey(agent))
	if errors.Is(err, eventlog.ErrNotFound) {
		return StreamInfo{}, fmt.Errorf("%w: agent %s has no stream", ErrUnknownStream, agent)
	}
	if err != nil {
		return StreamInfo{}, err
	}
	return s.Get(agent, string(id))
}

// List returns the agent's streams in key order. A read error of the view
// (eventlog.ErrClosed after the Log closed, an I/O error) is returned with
// the streams read before it, never taken for the end of the list.
func (s *Streams) List(agent string) ([]StreamInfo, error) {
	var out []StreamInfo
	for kv, err := range s.v.Scan([]byte("s/" + agent + "/")) {
		if err != nil {
			return out, fmt.Errorf("chunk: list streams of %s: %w", agent, err)
		}
		var info StreamInfo
		if err := json.Unmarshal(kv.Value, &info); err != nil {
			return out, &eventlog.CorruptError{What: "stream row", Err: err}
		}
		out = append(out, info)
	}
	return out, nil
}

// Ended yields the ended streams that are not expired and whose last chunk
// was stored before the given time, oldest first: the candidates of chunk
// retention. A read error is yielded last; the caller may stop ranging at
// any point.
func (s *Streams) Ended(before time.Time) iter.Seq2[StreamInfo, error] {
	return func(yield func(StreamInfo, error) bool) {
		cutoff := endedPrefix + endedTime(before)
		for kv, err := range s.v.Scan([]byte(endedPrefix)) {
			if err != nil {
				yield(StreamInfo{}, fmt.Errorf("chunk: ended streams: %w", err))
				return
			}
			if string(kv.Key) >= cutoff {
				return
			}
			var ref endedRef
			if err := json.Unmarshal(kv.Value, &ref); err != nil {
				if !yield(StreamInfo{}, &eventlog.CorruptError{What: "ended stream index " + string(kv.Key), Err: err}) {
					return
				}
				continue
			}
			info, err := s.Get(ref.Agent, ref.Stream)
			if !yield(info, err) {
				return
			}
		}
	}
}

// getter is the read part shared by a Batch and a View.
type getter interface {
	Get(key []byte) ([]byte, error)
}

func getJSON(g getter, key []byte, v any) (bool, error) {
	raw, err := g.Get(key)
	if errors.Is(err, eventlog.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return false, &eventlog.CorruptError{What: "stream row " + string(key), Err: err}
	}
	return true, nil
}

func setJSON(b *eventlog.Batch, key []byte, v any) error {
	var raw []byte
	var err error
	if info, ok := v.(StreamInfo); ok {
		raw, err = encodeInfo(info)
	} else {
		raw, err = json.Marshal(v)
	}
	if err != nil {
		return err
	}
	return b.Set(key, raw)
}
