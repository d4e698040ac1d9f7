package eventlog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/internal/apierror"
)

// TypeDeleted is the type of an agent's tombstone, which Delete appends: on
// the agent's events subject (the events tombstone), and on the chunks
// subject <prefix>.chunk.<agent>.<DeletedStream> (the chunks tombstone).
const TypeDeleted = "agent.deleted"

// DeletedStream is the chat stream token of the chunks tombstone. Chat
// stream ids are NUIDs, so no stream of a chat agent is ever called that.
const DeletedStream = "_deleted"

// Tombstone is the data of both tombstones.
type Tombstone struct {
	// Upto is the sequence of the agent's last event (or chunk, for the
	// chunks tombstone) before the tombstone, 0 when it had none.
	Upto Seq `json:"upto"`
	// At is when the delete began.
	At time.Time `json:"at"`
}

// Deleted reports one Delete.
type Deleted struct {
	// Seq is the events tombstone's sequence: the agent's only event once
	// the purge is done.
	Seq Seq
	// Chunks is the chunks tombstone's sequence in the chunks stream.
	Chunks Seq
	// Again is set when the agent's last event already was a tombstone (a
	// delete retried, or done twice): nothing was appended, the purges ran
	// again.
	Again bool
}

// ErrNothingToDelete is returned by Delete for an agent that has neither
// an event nor a chunk stored.
var ErrNothingToDelete error = apierror.Declare("eventlog", apierror.NotFound, "nothing to delete")

// Delete removes an agent from the log and from every view, leaving
// tombstones so that its id can be used again by a new agent that starts
// empty.
//
// First the chunks: the chunks tombstone is appended on the agent's
// DeletedStream subject and every chunk of the agent stored before it is
// purged (JetStream's purge by subject <prefix>.chunk.<agent>.> up to the
// tombstone). Then the events: the events tombstone is appended, expecting
// the agent's last sequence, and every event before it is purged. The
// Followers apply the events tombstone by deleting the agent's rows in
// every view with AgentRows (the way a snapshot with no rows would), and
// do not pass it to Apply; a view of the chunks stream sees the chunks
// tombstone in Apply (chat/chunk's streams view drops the agent's
// streams). A purge that a crash undid in part is checked, and what it
// left is deleted one message at a time, as Compact does.
//
// The log stays authoritative: a view rebuilt from an empty Pebble reads
// the tombstones (and anything a purge left before them) and ends with no
// row of the agent, as the live views. Events appended after the events
// tombstone belong to a new agent with the same id. A crash part way
// leaves a delete that a second Delete completes: it appends no second
// tombstone where one is already last, and purges again.
//
// The caller must make sure nothing writes the agent while it is deleted
// (agentd's host stops the agent and refuses its commands meanwhile);
// under an Owner only the agent's owner may delete it, and Compact never
// compacts an agent whose last event is its tombstone.
//
// Errors: ErrNothingToDelete; ErrInvalid for a bad agent, or a projection
// of the events stream without AgentRows (its rows could not be removed);
// ErrConflict when the agent appended between the read of its last
// sequence and the tombstone (try again); ErrNotOwner, ErrFenced, or a log
// error.
func (l *Log) Delete(ctx context.Context, agent string) (Deleted, error) {
	if !ValidToken(agent) {
		return Deleted{}, invalidf("delete: agent id %q is not a valid subject token", agent)
	}
	if err := l.deletable(); err != nil {
		return Deleted{}, fmt.Errorf("delete %q: %w", agent, err)
	}
	lastEvent, hasEvents, err := l.Last(ctx, Filter{Agent: agent})
	if err != nil && !isCorrupt(err) {
		return Deleted{}, err
	}
	lastChunk, hasChunks, err := l.Last(ctx, Filter{Agent: agent, Chunks: true})
	if err != nil && !isCorrupt(err) {
		return Deleted{}, err
	}
	if !hasEvents && !hasChunks {
		return Deleted{}, fmt.Errorf("%w: agent %q has no event and no chunk", ErrNothingToDelete, agent)
	}
	now := time.Now().UTC()
	var d Deleted
	if d.Chunks, err = l.deleteChunks(ctx, agent, lastChunk, hasChunks, now); err != nil {
		return d, err
	}
	if hasEvents && lastEvent.Type == TypeDeleted && lastEvent.Stream == "" {
		d.Seq, d.Again = lastEvent.Seq, true
	} else {
		ev, err := NewEvent(agent, TypeDeleted, Tombstone{Upto: lastEvent.Seq, At: now})
		if err != nil {
			return d, err
		}
		// One id per (agent, last sequence): a retried append is stored once.
		ev.ID = fmt.Sprintf("deleted.%s.%d", agent, lastEvent.Seq)
		ev.Time = now
		d.Seq, err = l.Append(ctx, ev, ExpectSeq(lastEvent.Seq))
		if errors.Is(err, ErrDuplicate) {
			err = nil
		}
		if err != nil {
			return d, fmt.Errorf("delete %q: append the tombstone: %w", agent, err)
		}
	}
	if err := l.purgeBefore(ctx, agent, d.Seq); err != nil {
		return d, err
	}
	l.logger.Info("agent deleted", "agent", agent, "tombstone", d.Seq, "chunks_tombstone", d.Chunks, "again", d.Again)
	return d, nil
}

// deleteChunks appends the chunks tombstone (unless the agent's last chunk
// is one) and purges every chunk of the agent before it. It returns the
// tombstone's sequence.
func (l *Log) deleteChunks(ctx context.Context, agent string, last Event, has bool, now time.Time) (Seq, error) {
	seq := last.Seq
	if !has || last.Type != TypeDeleted {
		ev, err := NewEvent(agent, TypeDeleted, Tombstone{Upto: last.Seq, At: now})
		if err != nil {
			return 0, err
		}
		ev.Stream, ev.Time = DeletedStream, now
		ev.ID = fmt.Sprintf("%s/%s.%d", DeletedStream, agent, last.Seq)
		seq, err = l.Append(ctx, ev)
		if errors.Is(err, ErrDuplicate) {
			err = nil
		}
		if err != nil {
			return 0, fmt.Errorf("delete %q: append the chunks tombstone: %w", agent, err)
		}
	}
	subject := l.cfg.Prefix + ".chunk." + l.partToken(agent) + agent + ".>"
	chunks := l.streamFor(agent, true)
	err := l.resent(ctx, func(ctx context.Context) error {
		return l.stream(chunks).Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(rawSeq(seq)))
	})
	if err != nil {
		return 0, fmt.Errorf("eventlog: purge %s before %d: %w", subject, seq, err)
	}
	if err := l.deleteLeft(ctx, l.stream(chunks), chunks, subject, seq); err != nil {
		return 0, err
	}
	if l.cfg.Owner != nil {
		// Every chat stream of the agent is gone: a new stream (a new agent
		// with this id) starts from nothing.
		f := l.fences.get(agent)
		f.mu.Lock()
		for s := range f.mu.streams {
			if s != DeletedStream {
				delete(f.mu.streams, s)
			}
		}
		f.mu.Unlock()
	}
	return seq, nil
}

// deleteLeft deletes, one message at a time, what a purge of subject
// before seq left stored (see deleteLeftBefore).
func (l *Log) deleteLeft(ctx context.Context, st jetstream.Stream, stream, subject string, seq Seq) error {
	var last Seq
	for n := 0; ; n++ {
		first, err := l.leaderFirstSeq(ctx, stream, subject)
		if err != nil {
			return err
		}
		if first == 0 || first >= seq {
			if n > 0 {
				l.logger.Warn("deleted what a purge left before a tombstone", "subject", subject, "tombstone", seq, "deleted", n)
			}
			return nil
		}
		if first == last {
			return fmt.Errorf("eventlog: %s: message %d before the tombstone at %d stays after its delete", subject, first, seq)
		}
		last = first
		bctx, cancel, _ := l.bound(ctx)
		err = st.DeleteMsg(bctx, rawSeq(first))
		cancel()
		if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("eventlog: delete %s message %d before the tombstone at %d: %w", subject, first, seq, err)
		}
	}
}

// deletable checks that every projection of the events stream can drop an
// agent's rows: each has AgentRows.
func (l *Log) deletable() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.mu.projections {
		if r.events && r.p.AgentRows == nil {
			return invalidf("projection %q has no AgentRows; its rows of the agent could not be removed", r.p.Name)
		}
	}
	return nil
}

func isCorrupt(err error) bool {
	var ce *CorruptError
	return errors.As(err, &ce)
}

// applyTombstone removes every row agent's events wrote to m's view (its
// AgentRows), as part 0 of a snapshot without rows would.
func (f *Follower) applyTombstone(m *member, agent string) error {
	var old []KV
	for kv, err := range m.p.AgentRows(&m.batch, agent) {
		if err != nil {
			return err
		}
		old = append(old, kv)
	}
	for _, kv := range old {
		if err := m.batch.Delete(kv.Key); err != nil {
			return err
		}
	}
	if m.p.RowsChanged != nil {
		return m.p.RowsChanged(&m.batch, agent, old, nil)
	}
	return nil
}
