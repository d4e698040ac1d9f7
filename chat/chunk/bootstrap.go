package chunk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/forever-agents/forever/eventlog"
)

// bootstrapStreams is the streams projection's Bootstrap: a view built
// from nothing reads each stream's first and last stored event
// (eventlog.Log.Ends), not every chunk, so a rebuild costs what the
// streams cost, not their chunks. From the first: FirstSeq, StartedAt and,
// when it is the start chunk, the request and message ids; from the last:
// LastSeq, UpdatedAt, the chunk count (its index + 1) and the status (a
// terminal chunk is a stream's last). A stream whose ends do not tell (its
// last event a split chunk's final part, an expiry marker with chunks
// beside it, an event that does not decode) is read whole and applied as
// a replay would. Every stream's row is then what a replay of its events
// gives, but for two things a replay could not know either: chunks the
// stream's safety cap removed from its start (FirstSeq is the first one
// still stored), and chunks after a terminal one (none are written).
func bootstrapStreams(ctx context.Context, lg *eventlog.Log) (func(b *eventlog.Batch) error, eventlog.Seq, error) {
	ends, upto, err := lg.Ends(ctx, eventlog.Filter{Chunks: true})
	if err != nil {
		return nil, 0, err
	}
	rows := make([]StreamInfo, 0, len(ends))
	var replays [][]eventlog.Event
	tombs := tombstones(ends)
	for _, se := range ends {
		if se.First.Seq == 0 || isTombstone(se) {
			continue // emptied since it was listed; a deleted agent's tombstone
		}
		info, ok := fromEnds(se)
		if ok {
			if !deletedRow(tombs, info, se.First.Seq) {
				rows = append(rows, info)
			}
			continue
		}
		evs, err := readSubject(ctx, lg, se.First)
		if err != nil {
			return nil, 0, err
		}
		replays = append(replays, evs)
	}
	write := func(b *eventlog.Batch) error {
		for _, evs := range replays {
			for _, e := range evs {
				if err := applyStream(b, e); err != nil {
					return err
				}
			}
			var info StreamInfo
			if found, err := getJSON(b, streamKey(evs[0].Agent, evs[0].Stream), &info); err != nil {
				return err
			} else if found && !deletedRow(tombs, info, evs[0].Seq) {
				rows = append(rows, info)
			}
		}
		if err := writeTombstones(b, tombs); err != nil {
			return err
		}
		latest := map[string]StreamInfo{}
		for _, info := range rows {
			if err := setJSON(b, streamKey(info.Agent, info.Stream), info); err != nil {
				return err
			}
			if err := reindexEnded(b, nil, info); err != nil {
				return err
			}
			if cur, ok := latest[info.Agent]; !ok || startedAfter(info, cur) {
				latest[info.Agent] = info
			}
		}
		for agent, info := range latest {
			if err := b.Set(latestKey(agent), []byte(info.Stream)); err != nil {
				return err
			}
		}
		return nil
	}
	return write, upto, nil
}

// startedAfter reports whether stream a started after stream b: its first
// chunk has the higher sequence (a live view makes the stream whose first
// chunk came last the latest).
func startedAfter(a, b StreamInfo) bool {
	if a.FirstSeq != b.FirstSeq && a.FirstSeq != 0 && b.FirstSeq != 0 {
		return a.FirstSeq > b.FirstSeq
	}
	return a.StartedAt.After(b.StartedAt)
}

// fromEnds builds a stream's row from its first and last stored events;
// ok is false when they do not tell enough (see bootstrapStreams).
func fromEnds(se eventlog.SubjectEnds) (StreamInfo, bool) {
	first, last := se.First, se.Last
	if se.Err != nil || last.Seq == 0 || first.Agent == "" || first.Stream == "" {
		return StreamInfo{}, false
	}
	if first.Type == EventExpired {
		if last.Seq != first.Seq {
			return StreamInfo{}, false
		}
		// Retention purged the chunks: the marker holds the row.
		var info StreamInfo
		if json.Unmarshal(first.Data, &info) != nil {
			info = StreamInfo{}
		}
		info.Agent, info.Stream = first.Agent, first.Stream
		if info.Status == "" {
			info.Status = StatusCompleted
		}
		info.Expired, info.ExpiredAt = true, first.Time
		return info, true
	}
	if last.Type == EventExpired {
		return StreamInfo{}, false
	}
	info := StreamInfo{Agent: first.Agent, Stream: first.Stream, Status: StatusStreaming,
		FirstSeq: first.Seq, StartedAt: first.Time, LastSeq: last.Seq, UpdatedAt: last.Time}
	switch first.Type {
	case EventChunk:
		if c, err := decode(first.Data); err == nil && c.Type == Start {
			info.MessageID, info.RequestID = c.MessageID, c.RequestID
		}
	case EventChunks:
		if _, bodies, err := unpack(first.Data); err == nil {
			if c, err := decode(bodies[0]); err == nil && c.Type == Start {
				info.MessageID, info.RequestID = c.MessageID, c.RequestID
			}
		}
	}
	idx, ok := IndexOf(last)
	if !ok {
		return StreamInfo{}, false
	}
	switch last.Type {
	case EventChunk:
		info.Chunks = idx + 1
		c, err := decode(last.Data)
		if err != nil {
			return StreamInfo{}, false
		}
		if st := c.EndStatus(); st != "" {
			info.Status = st
		}
		if c.Type == Error {
			info.Error = c.ErrorText
		}
	case EventChunks:
		i, bodies, err := unpack(last.Data)
		if err != nil || i != idx {
			return StreamInfo{}, false
		}
		info.Chunks = idx + len(bodies)
		for _, b := range bodies {
			c, err := decode(b)
			if err != nil {
				return StreamInfo{}, false
			}
			info.see(c) // as the projection applies them
		}
	case EventPart:
		var p chunkPart
		if json.Unmarshal(last.Data, &p) != nil || p.Part == p.Parts-1 {
			return StreamInfo{}, false // a whole split chunk: is it the end?
		}
		info.Chunks = idx
	default:
		return StreamInfo{}, false
	}
	return info, true
}

// readSubject reads every event of the stream first belongs to, skipping
// events that do not decode (as the projection skips them).
func readSubject(ctx context.Context, lg *eventlog.Log, first eventlog.Event) ([]eventlog.Event, error) {
	agent, stream := first.Agent, first.Stream
	if agent == "" || stream == "" {
		// A first event that does not decode: the subject names them.
		parts := strings.Split(first.Subject, ".")
		if len(parts) < 2 {
			return nil, nil
		}
		agent, stream = parts[len(parts)-2], parts[len(parts)-1]
	}
	var out []eventlog.Event
	var after eventlog.Seq
	for {
		evs, err := lg.Read(ctx, eventlog.Filter{Agent: agent, Stream: stream}, after, 0)
		out = append(out, evs...)
		var ce *eventlog.CorruptError
		switch {
		case errors.As(err, &ce) && ce.Seq > after:
			after = ce.Seq
		case err != nil:
			return nil, fmt.Errorf("chunk: read stream %s/%s: %w", agent, stream, err)
		default:
			return out, nil
		}
	}
}
