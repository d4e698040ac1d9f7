package eventlog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TypeSnapshot is the type of the events Compact appends: the parts of one
// agent snapshot, stored as one atomic batch.
const TypeSnapshot = "log.snapshot"

// Snapshot is the data of one snapshot event: a part of the rows every
// compactable view holds for the agent after its events up to Upto.
type Snapshot struct {
	// Upto is the sequence of the agent's last event the snapshot covers.
	Upto Seq `json:"upto"`
	// Part counts from 0; Parts is the number of parts of the snapshot.
	Part  int `json:"part"`
	Parts int `json:"parts"`
	// Views holds, per projection name, its schema version and rows. Part
	// 0 names every view, with no rows if it has none for the agent.
	Views map[string]SnapshotView `json:"views"`
}

// SnapshotView is one view's rows in a snapshot part.
type SnapshotView struct {
	Version int  `json:"version"`
	Rows    []KV `json:"rows,omitempty"`
}

// Compacted reports one Compact.
type Compacted struct {
	// Seq is the sequence of the snapshot's first part: every event of the
	// agent before it was purged.
	Seq Seq
	// Upto is the agent's last event before the snapshot.
	Upto Seq
	// Parts and Rows are the snapshot's events and rows; Bytes its data.
	Parts, Rows, Bytes int
}

// snapshotOverhead is room left in each part for the envelope and headers.
const snapshotOverhead = 16 << 10

// ErrNothingToCompact is returned by Compact for an agent without events,
// or whose last event is already a snapshot.
var ErrNothingToCompact = errors.New("eventlog: nothing to compact")

// Compact replaces agent's history with a snapshot: it waits until every
// projection of the events stream has applied the agent's last event,
// reads the rows each holds for the agent (Projection.AgentRows), appends
// them as TypeSnapshot events in one atomic batch that expects the agent's
// last sequence, and then purges the agent's events before the snapshot
// (JetStream's purge by subject up to a sequence).
//
// The log stays authoritative: rebuilding a view from an empty Pebble
// replays the snapshot (which replaces the agent's rows) and the events
// after it, and gives the rows the view had. A crash between the append
// and the purge leaves both the history and the snapshot, which replays to
// the same rows; the next Compact purges both. Under an Owner the append
// is fenced like every other, so only the agent's owner compacts it; the
// purge only removes events a stored snapshot covers, so it is safe even
// from a writer that has since lost the agent.
//
// Errors: ErrNothingToCompact; ErrConflict when the agent appended since
// its last sequence was read (try later); ErrInvalid for a bad agent or a
// projection of the events stream without AgentRows (compacting would
// lose its history); ErrTooLarge when the snapshot needs more parts than
// one atomic batch holds (Config.MaxBatch); ErrNotOwner, ErrFenced, or a
// log or Pebble error.
func (l *Log) Compact(ctx context.Context, agent string) (Compacted, error) {
	start := time.Now()
	c, err := l.compact(ctx, agent)
	result := "ok"
	switch {
	case errors.Is(err, ErrNothingToCompact):
		result = "nothing"
	case errors.Is(err, ErrConflict):
		result = "conflict"
	case err != nil:
		result = "error"
	}
	l.metrics.compactions.WithLabelValues(result).Inc()
	if err == nil {
		l.metrics.compactSeconds.Observe(time.Since(start).Seconds())
		l.logger.Debug("agent compacted", "agent", agent, "snapshot", c.Seq, "upto", c.Upto,
			"parts", c.Parts, "rows", c.Rows, "bytes", c.Bytes, "took", time.Since(start))
	}
	return c, err
}

func (l *Log) compact(ctx context.Context, agent string) (Compacted, error) {
	if !ValidToken(agent) {
		return Compacted{}, invalidf("compact: agent id %q is not a valid subject token", agent)
	}
	views, err := l.compactable()
	if err != nil {
		return Compacted{}, err
	}
	last, ok, err := l.Last(ctx, Filter{Agent: agent})
	if err != nil {
		return Compacted{}, err
	}
	if !ok {
		return Compacted{}, fmt.Errorf("%w: agent %q has no events", ErrNothingToCompact, agent)
	}
	if last.Type == TypeDeleted {
		// A deleted agent: its tombstone stays its only event.
		return Compacted{}, fmt.Errorf("%w: agent %q is deleted", ErrNothingToCompact, agent)
	}
	if last.Type == TypeSnapshot {
		// A compaction that stopped after its append (a crash) left the
		// history before the snapshot: purge it now.
		s, err := snapshotOf(last)
		if err != nil {
			return Compacted{}, err
		}
		first := last.Seq - Seq(s.Parts-1)
		if err := l.purgeBefore(ctx, agent, first); err != nil {
			return Compacted{}, err
		}
		return Compacted{}, fmt.Errorf("%w: agent %q: its last event is a snapshot", ErrNothingToCompact, agent)
	}
	waited := map[*Follower]bool{}
	for _, r := range views {
		if !waited[r.f] {
			waited[r.f] = true
			if err := r.f.WaitFor(ctx, last.Seq); err != nil {
				return Compacted{}, err
			}
		}
	}
	parts, rows, size, err := l.snapshotParts(agent, last.Seq, views)
	if err != nil {
		return Compacted{}, err
	}
	if len(parts) > l.cfg.MaxBatch {
		return Compacted{}, fmt.Errorf("%w: the snapshot of agent %q needs %d parts (%d bytes); one atomic batch holds %d",
			ErrTooLarge, agent, len(parts), size, l.cfg.MaxBatch)
	}
	evs := make([]Event, len(parts))
	for i := range parts {
		parts[i].Parts = len(parts)
		ev, err := NewEvent(agent, TypeSnapshot, parts[i])
		if err != nil {
			return Compacted{}, err
		}
		// One id per (agent, covered sequence, part): a retried append of
		// the same snapshot is stored once.
		ev.ID = fmt.Sprintf("snapshot.%s.%d.%d", agent, last.Seq, i)
		evs[i] = ev
	}
	seq, err := l.AppendBatch(ctx, evs, ExpectSeq(last.Seq))
	if err != nil {
		return Compacted{}, fmt.Errorf("compact %q: append the snapshot: %w", agent, err)
	}
	first := seq - Seq(len(evs)) + 1
	c := Compacted{Seq: first, Upto: last.Seq, Parts: len(evs), Rows: rows, Bytes: size}
	if l.stopCompact != nil {
		if err := l.stopCompact("appended"); err != nil {
			return c, err
		}
	}
	if err := l.purgeBefore(ctx, agent, first); err != nil {
		return c, err
	}
	return c, nil
}

// compactable returns the projections of the events stream; every one must
// have AgentRows.
func (l *Log) compactable() ([]registered, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []registered
	for _, r := range l.mu.projections {
		if !r.events {
			continue
		}
		if r.p.AgentRows == nil {
			return nil, invalidf("compact: projection %q has no AgentRows; compacting would lose its history", r.p.Name)
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, invalidf("compact: no projection of the events stream is registered")
	}
	slices.SortFunc(out, func(a, b registered) int { return strings.Compare(a.p.Name, b.p.Name) })
	return out, nil
}

// snapshotParts reads the agent's rows of every view and splits them into
// parts that each fit one event.
func (l *Log) snapshotParts(agent string, upto Seq, views []registered) ([]Snapshot, int, int, error) {
	budget := max(int(l.MaxPayload())-snapshotOverhead, 4<<10)
	first := Snapshot{Upto: upto, Views: map[string]SnapshotView{}}
	parts := []Snapshot{first}
	cur, used, rows, size := &parts[0], 0, 0, 0
	for _, r := range views {
		v, err := l.View(r.p.Name)
		if err != nil {
			return nil, 0, 0, err
		}
		parts[0].Views[r.p.Name] = SnapshotView{Version: r.p.rowsLabel()}
		for kv, err := range r.p.AgentRows(v, agent) {
			if err != nil {
				return nil, 0, 0, fmt.Errorf("compact %q: read view %s: %w", agent, r.p.Name, err)
			}
			// base64 of key and value, quotes and braces.
			n := (len(kv.Key)+len(kv.Value))*4/3 + 24
			if n > budget {
				return nil, 0, 0, fmt.Errorf("%w: a row of view %s of agent %q is %d bytes; a snapshot part holds %d",
					ErrTooLarge, r.p.Name, agent, n, budget)
			}
			if used+n > budget {
				parts = append(parts, Snapshot{Upto: upto, Part: len(parts), Views: map[string]SnapshotView{}})
				cur, used = &parts[len(parts)-1], 0
			}
			sv := cur.Views[r.p.Name]
			sv.Version = r.p.rowsLabel()
			sv.Rows = append(sv.Rows, kv)
			cur.Views[r.p.Name] = sv
			used += n
			size += n
			rows++
		}
	}
	return parts, rows, size, nil
}

// purgeBefore removes agent's events stored before seq.
func (l *Log) purgeBefore(ctx context.Context, agent string, seq Seq) error {
	// A view that applied these events keeps them across a crash: the
	// stream will not have them to apply again.
	if err := l.syncViews(ctx); err != nil {
		return err
	}
	subject := l.EventsSubject(agent)
	if l.skipPurge {
		l.skipPurge = false // a test's purge that removed nothing
	} else if err := l.resent(ctx, func(ctx context.Context) error {
		return l.stream(l.streamFor(agent, false)).Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(rawSeq(seq)))
	}); err != nil {
		return fmt.Errorf("eventlog: purge %s before %d: %w", subject, seq, err)
	}
	return l.deleteLeftBefore(ctx, agent, seq)
}

// deleteLeftBefore deletes, one message at a time, what a purge of the
// agent's events before seq left stored. A chaos run found purged events
// stored again after SIGKILLs, which the next purge by subject did not
// remove while it removed newer ones (docs/architecture.md, "A purge a
// crash undid"). Normally the agent's first event is the snapshot, and
// this is one request to the stream's leader.
func (l *Log) deleteLeftBefore(ctx context.Context, agent string, seq Seq) error {
	subject := l.EventsSubject(agent)
	var last Seq
	for n := 0; ; n++ {
		first, err := l.leaderFirstSeq(ctx, l.streamFor(agent, false), subject)
		if err != nil {
			return err
		}
		if first == 0 || first >= seq {
			if n > 0 {
				l.logger.Warn("deleted the events a purge left before a snapshot", "agent", agent, "snapshot", seq, "deleted", n)
			}
			return nil
		}
		if first == last {
			return fmt.Errorf("eventlog: %s: event %d before the snapshot at %d stays after its delete", subject, first, seq)
		}
		last = first
		err = l.resent(ctx, func(ctx context.Context) error {
			return l.stream(l.streamFor(agent, false)).DeleteMsg(ctx, rawSeq(first))
		})
		if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("eventlog: delete %s event %d before the snapshot at %d: %w", subject, first, seq, err)
		}
	}
}

// rowsLabel is the version a snapshot labels p's rows with: the oldest
// Version that reads them as they are (RowsReadableFrom), else Version.
func (p *Projection) rowsLabel() int {
	if p.RowsReadableFrom > 0 && p.RowsReadableFrom < p.Version {
		return p.RowsReadableFrom
	}
	return p.Version
}

// readsRowsOf reports whether p takes snapshot rows labelled version v as
// they are: v is Version, or between RowsReadableFrom and Version.
func (p *Projection) readsRowsOf(v int) bool {
	return v == p.Version || (p.RowsReadableFrom > 0 && p.RowsReadableFrom <= v && v <= p.Version)
}

// snapshotOf decodes e when it is a snapshot part (nil otherwise).
func snapshotOf(e Event) (*Snapshot, error) {
	if e.Type != TypeSnapshot || e.Stream != "" {
		return nil, nil
	}
	var s Snapshot
	if err := e.Decode(&s); err != nil {
		return nil, err
	}
	if s.Part < 0 || s.Parts < 1 || s.Part >= s.Parts {
		return nil, &CorruptError{What: "snapshot part", Seq: e.Seq, Subject: e.Subject,
			Err: fmt.Errorf("part %d of %d", s.Part, s.Parts)}
	}
	return &s, nil
}

// applySnapshot applies one snapshot part to m: part 0 replaces the
// agent's rows with its own, later parts add theirs. A view the snapshot
// does not name (added after it was taken) keeps what the events gave it;
// a view whose Version changed since reads the rows through its
// MigrateRows, and without one cannot read them: both are logged, and the
// second is quarantined, since the view then misses the agent's compacted
// history.
func (f *Follower) applySnapshot(b *Batch, m *member, e Event, s *Snapshot) (quarantine string, err error) {
	if m.p.AgentRows == nil {
		return "", nil
	}
	sv, ok := s.Views[m.p.Name]
	if !ok {
		if s.Part == 0 {
			f.logger.Warn("a snapshot does not hold this view: it keeps only what later events give it",
				"view", m.p.Name, "agent", e.Agent, "seq", e.Seq)
		}
		return "", nil
	}
	rows := sv.Rows
	if !m.p.readsRowsOf(sv.Version) {
		if m.p.MigrateRows == nil || sv.Version > m.p.Version {
			return fmt.Sprintf("snapshot rows of view %s are at version %d, the view is at %d and cannot migrate them", m.p.Name, sv.Version, m.p.Version), nil
		}
		if rows, err = m.p.MigrateRows(e.Agent, sv.Version, sv.Rows); err != nil {
			return fmt.Sprintf("snapshot rows of view %s at version %d: migrating them to version %d: %v", m.p.Name, sv.Version, m.p.Version, err), nil
		}
	}
	var removed []KV
	if s.Part == 0 {
		for kv, err := range m.p.AgentRows(b, e.Agent) {
			if err != nil {
				return "", err
			}
			removed = append(removed, kv)
		}
		for _, kv := range removed {
			if err := b.Delete(kv.Key); err != nil {
				return "", err
			}
		}
	}
	for _, kv := range rows {
		if s.Part > 0 && m.p.RowsChanged != nil {
			if v, err := b.Get(kv.Key); err == nil {
				removed = append(removed, KV{Key: kv.Key, Value: v})
			} else if !errors.Is(err, ErrNotFound) {
				return "", err
			}
		}
		if err := b.Set(kv.Key, kv.Value); err != nil {
			return "", err
		}
	}
	if m.p.RowsChanged != nil {
		if err := m.p.RowsChanged(b, e.Agent, removed, rows); err != nil {
			return "", err
		}
	}
	return "", nil
}
