package chunk

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/jsonstr"
)

// EventChunks is a packed record: several consecutive chunks of one stream
// in one event (data {"i": <index of the first>, "c": [<chunk JSON>, ...]},
// id <stream>/<index of the first>). A Writer made with PackChunks writes
// it, only once every node of the cluster reads it (agentd's
// FormatChunkBatches): the chunks queued together behind a batch being
// stored go as one message, so one fsync, where EventChunk events cost one
// each.
const EventChunks = "chunks"

// packed is the data of an EventChunks event.
type packed struct {
	Index  int               `json:"i"`
	Chunks []json.RawMessage `json:"c"`
}

// packOverhead bounds the bytes an EventChunks record adds around its
// chunks: the index and the brackets, and a comma a chunk.
const packOverhead = 32

// encodePacked returns the data of an EventChunks record holding bodies,
// the chunks first, first+1, ...
func encodePacked(first int, bodies [][]byte) []byte {
	n := packOverhead
	for _, b := range bodies {
		n += len(b) + 1
	}
	out := make([]byte, 0, n)
	out = append(out, `{"i":`...)
	out = strconv.AppendInt(out, int64(first), 10)
	out = append(out, `,"c":[`...)
	for k, b := range bodies {
		if k > 0 {
			out = append(out, ',')
		}
		out = append(out, b...)
	}
	return append(out, "]}"...)
}

// unpack returns the index of the first chunk of an EventChunks record and
// the JSON of each of its chunks.
func unpack(data []byte) (int, []json.RawMessage, error) {
	if i, cs, ok := fastUnpack(data); ok {
		return i, cs, nil
	}
	var p packed
	if err := json.Unmarshal(data, &p); err != nil {
		return 0, nil, fmt.Errorf("chunk: decode packed chunks: %w", err)
	}
	if p.Index < 0 || len(p.Chunks) == 0 {
		return 0, nil, fmt.Errorf("chunk: packed chunks at index %d hold %d chunks", p.Index, len(p.Chunks))
	}
	return p.Index, p.Chunks, nil
}

// Span returns the indices of the chunks a stored chunk event completes:
// the first and how many. An EventChunk is its one chunk; an EventChunks
// record its n chunks; an EventPart the chunk it belongs to when it is
// the last part, none (n 0) for another part. ok is false for an event of
// another type or one that does not decode.
func Span(e eventlog.Event) (first, n int, ok bool) {
	idx, ok := IndexOf(e)
	if !ok {
		return 0, 0, false
	}
	switch e.Type {
	case EventChunk:
		return idx, 1, true
	case EventChunks:
		i, bodies, err := unpack(e.Data)
		if err != nil || i != idx {
			return 0, 0, false
		}
		return i, len(bodies), true
	case EventPart:
		var p chunkPart
		if json.Unmarshal(e.Data, &p) != nil {
			return 0, 0, false
		}
		if p.Part == p.Parts-1 {
			return idx, 1, true
		}
		return idx, 0, true
	}
	return 0, 0, false
}

// fastUnpack reads an EventChunks record in the form encodePacked writes
// (a non-negative index, one chunk or more, no spaces) as unpack would,
// without reflection: the streams view unpacks every record it applies,
// and a resume every record it sends. Anything else it leaves to unpack
// (ok false). The chunks are copied, as json.Unmarshal copies them.
func fastUnpack(data []byte) (int, []json.RawMessage, bool) {
	b, ok := jsonstr.Cut(data, `{"i":`)
	if !ok {
		return 0, nil, false
	}
	n := jsonstr.ValueEnd(b)
	if n == 0 || n > 1 && b[0] == '0' {
		return 0, nil, false
	}
	for _, c := range b[:n] {
		if c < '0' || c > '9' {
			return 0, nil, false
		}
	}
	index, err := strconv.Atoi(string(b[:n]))
	if err != nil {
		return 0, nil, false
	}
	if b, ok = jsonstr.Cut(b[n:], `,"c":[`); !ok || !json.Valid(data) {
		return 0, nil, false
	}
	// One copy of the chunks, each chunk a slice of it that cannot grow
	// into the next.
	b = bytes.Clone(b)
	var chunks []json.RawMessage
	for {
		n := jsonstr.ValueEnd(b)
		if n == 0 || b[0] == 'n' { // null: json.Unmarshal keeps it as "null"
			return 0, nil, false
		}
		chunks = append(chunks, json.RawMessage(b[:n:n]))
		switch {
		case bytes.HasPrefix(b[n:], []byte(",")):
			b = b[n+1:]
		case string(b[n:]) == "]}":
			return index, chunks, true
		default:
			return 0, nil, false
		}
	}
}
