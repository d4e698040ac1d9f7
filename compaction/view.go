package compaction

import (
	"encoding/binary"
	"errors"
	"iter"

	"github.com/forever-agents/forever/eventlog"
)

// ViewName is the name of the stats view.
const ViewName = "compaction"

// The floor past which an agent is a candidate the sweep reads. A policy
// threshold below it acts as the floor.
const (
	CandidateEvents = 256
	CandidateBytes  = 256 << 10
)

// Stats is what an agent stored since its last snapshot.
type Stats struct {
	Events int64 `json:"events"`
	Bytes  int64 `json:"bytes"`
}

// Key layout (agent ids are subject tokens, without NUL):
//
//	s\x00<agent>  Stats: events, bytes (8 bytes each, big endian)
//	c\x00<agent>  empty, while the agent is past the candidate floor
func statsKey(agent string) []byte     { return []byte("s\x00" + agent) }
func candidateKey(agent string) []byte { return []byte("c\x00" + agent) }

var candidatePrefix = []byte("c\x00")

// View returns the stats view. Its AgentRows yields nothing: a snapshot
// starts the counts again (Apply resets them on its first part).
func View() eventlog.Projection {
	return eventlog.Projection{
		Name:    ViewName,
		Version: 2,
		Filter:  eventlog.Filter{},
		Apply:   apply,
		AgentRows: func(eventlog.Reader, string) iter.Seq2[eventlog.KV, error] {
			return func(func(eventlog.KV, error) bool) {}
		},
	}
}

// AddView registers the stats view on views, the Follower of the events
// stream.
func AddView(views *eventlog.Follower) error { return views.Add(View()) }

func apply(b *eventlog.Batch, e eventlog.Event) error {
	st, err := readStats(b, e.Agent)
	if err != nil {
		return err
	}
	was := st.candidate()
	if e.Type == eventlog.TypeSnapshot {
		var s eventlog.Snapshot
		if e.Decode(&s) == nil && s.Part == 0 {
			st = Stats{}
		}
	}
	st.Events++
	st.Bytes += int64(len(e.Data))
	if err := b.Set(statsKey(e.Agent), st.encode()); err != nil {
		return err
	}
	// The candidate key changes only when the agent crosses the floor
	// (counts only grow between snapshots): no write per event for it.
	switch now := st.candidate(); {
	case now && !was:
		return b.Set(candidateKey(e.Agent), nil)
	case was && !now:
		return b.Delete(candidateKey(e.Agent))
	}
	return nil
}

// candidate reports whether st is past the floor the sweep reads.
func (st Stats) candidate() bool { return st.Events >= CandidateEvents || st.Bytes >= CandidateBytes }

// encode is the row of st: events and bytes, 8 bytes each, big endian
// (applied on every event of every agent, so no JSON).
func (st Stats) encode() []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(st.Events)), uint64(st.Bytes))
}

func readStats(r eventlog.Reader, agent string) (Stats, error) {
	var st Stats
	v, err := r.Get(statsKey(agent))
	if errors.Is(err, eventlog.ErrNotFound) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if len(v) != 16 {
		// A row this view wrote is 16 bytes; start again.
		return Stats{}, nil
	}
	st.Events, st.Bytes = int64(binary.BigEndian.Uint64(v)), int64(binary.BigEndian.Uint64(v[8:]))
	return st, nil
}
