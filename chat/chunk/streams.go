package chunk

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/forever-agents/forever/eventlog"
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
}

// Done reports whether the stream has ended.
func (s StreamInfo) Done() bool { return s.Status != StatusStreaming }

// StreamsProjectionName is the name of the stream metadata projection.
const StreamsProjectionName = "streams"

func streamKey(agent, stream string) []byte { return []byte("s/" + agent + "/" + stream) }
func latestKey(agent string) []byte         { return []byte("l/" + agent) }

// StreamsProjection returns the projection of stream metadata: one row per
// stream (status, request id, first and last sequence, chunk count) and the
// latest stream of each agent.
func StreamsProjection() eventlog.Projection {
	return eventlog.Projection{
		Name:    StreamsProjectionName,
		Version: 1,
		Filter:  eventlog.Filter{Chunks: true},
		Apply:   applyStream,
	}
}

func applyStream(b *eventlog.Batch, e eventlog.Event) error {
	key := streamKey(e.Agent, e.Stream)
	var info StreamInfo
	found, err := getJSON(b, key, &info)
	if err != nil {
		return err
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
		c, err := decode(e.Data)
		if err != nil {
			break // counted; a chunk that does not decode carries no status
		}
		if c.Type == Start {
			info.MessageID, info.RequestID = c.MessageID, c.RequestID
		}
		if st := c.EndStatus(); st != "" {
			info.Status = st
		}
		if c.Type == Error {
			info.Error = c.ErrorText
		}
	case EventPart:
		var p chunkPart
		if json.Unmarshal(e.Data, &p) == nil && p.Part == p.Parts-1 {
			info.Chunks++
		}
	}
	return setJSON(b, key, info)
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
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Set(key, raw)
}
