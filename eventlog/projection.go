package eventlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"

	"github.com/cockroachdb/pebble/v2"
)

// Projection is a view of the log kept in Pebble: a name, a schema version,
// the events it reads and a function that applies one event to a Batch.
//
// Apply must be deterministic: given the same events in the same order it
// must write the same rows, because a view is rebuilt from the log whenever its
// Pebble data is lost or its Version changes. Apply must not do I/O besides the
// Batch. An Apply error stops the projector (Run returns it); the event is not
// applied and the cursor stays before it.
type Projection struct {
	// Name is a valid subject token, unique within the Log.
	Name string
	// Version is the schema version. When the stored version differs, the
	// projection's rows and cursor are dropped and rebuilt from the log.
	Version int
	// Filter selects the events applied.
	Filter Filter
	// Apply writes e's changes to b.
	Apply func(b *Batch, e Event) error
	// AgentRows, for a projection of the events stream, yields every row
	// of the view that agent's events wrote (its key relative to the view,
	// and its value), read through r. A projection with AgentRows can be
	// compacted: Log.Compact stores these rows in a snapshot and the
	// Follower applies the snapshot by replacing them (see Compact). A
	// projection of the events stream without it makes Compact refuse.
	// Apply still sees each snapshot part (TypeSnapshot), after its rows
	// are in place: a view that counts events skips them.
	AgentRows func(r Reader, agent string) iter.Seq2[KV, error]
	// RowsChanged, when set, is called when the Follower itself removes
	// or sets rows of agent, which Apply does not see: an agent's
	// tombstone (removed: every row of the agent) and a snapshot part
	// (part 0 removes the agent's rows and sets its own, a later part
	// sets its own; removed also holds a row a part overwrote, with its
	// old value). It runs after the change, in the same batch, so a view
	// that keeps a figure over every agent's rows (a total, not a row of
	// one agent) keeps it equal to what a rebuild gives. Rows are
	// relative to the view.
	RowsChanged func(b *Batch, agent string, removed, added []KV) error
	// MigrateRows turns the rows of a snapshot part stored by an older
	// Version of this projection (from) into rows of this Version. A
	// projection that changes Version loses the compacted history of every
	// agent whose snapshot holds older rows (the part is quarantined)
	// unless it sets MigrateRows for those versions. An error quarantines
	// the part too. Nil: no migration.
	MigrateRows func(agent string, from int, rows []KV) ([]KV, error)
	// RowsReadableFrom, when set, is the oldest Version whose Apply and
	// readers take this Version's rows as they are: a change that only
	// adds a field older readers ignore (omitempty JSON). Snapshots label
	// their rows with it, not with Version, so a node of the previous
	// release applies the snapshots a node of this one writes during a
	// rolling upgrade instead of quarantining them; and a part labelled
	// with any version from it up to Version is applied as it is. 0: only
	// Version's own rows are read as they are.
	RowsReadableFrom int
	// Bootstrap, when set, builds the view from what it reads of the log
	// instead of replaying every event, whenever the view starts from
	// nothing: new, a changed Version, a lost Pebble, another stream, or
	// Rebuild. It reads what it needs through lg (Log.Ends: each subject's
	// first and last event) and returns write, which puts the rows into b,
	// and upto, a sequence every event at or before which the rows reflect
	// (Ends's). The Follower commits the rows with the cursor at upto in
	// one synced batch and follows from upto+1; Apply must therefore take
	// an event the rows already reflect (read later than upto) as applied.
	// With Bootstrap a rebuild costs what the stream's subjects cost, not
	// its events. Nil: replay from sequence 1.
	Bootstrap func(ctx context.Context, lg *Log) (write func(b *Batch) error, upto Seq, err error)
}

// Reader reads a projection's rows: a *View, or the *Batch of an Apply.
type Reader interface {
	Get(key []byte) ([]byte, error)
	Scan(prefix []byte) iter.Seq2[KV, error]
}

// Rows yields the rows of r stored under the exact keys, then those under
// each prefix: the usual AgentRows of a view whose keys put the agent
// right after a tag (see chat's and fiber's views). A prefix must end with
// a separator the agent id cannot contain, so it never matches another
// agent whose id extends this one.
func Rows(r Reader, keys, prefixes [][]byte) iter.Seq2[KV, error] {
	return func(yield func(KV, error) bool) {
		for _, k := range keys {
			v, err := r.Get(k)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				yield(KV{}, err)
				return
			}
			if !yield(KV{Key: bytes.Clone(k), Value: v}, nil) {
				return
			}
		}
		for _, p := range prefixes {
			for kv, err := range r.Scan(p) {
				if !yield(kv, err) || err != nil {
					return
				}
			}
		}
	}
}

// registered is a projection registered on the Log, with its Follower.
type registered struct {
	p      Projection
	f      *Follower
	events bool // it reads the events stream
}

// Key layout: every projection owns the keyspace "p\x00<name>\x00".
// Under it, "c" holds the cursor, "v" the schema version, "d"+key the rows.
func projPrefix(name string) []byte { return []byte("p\x00" + name + "\x00") }

func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

func encodeUint(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func decodeUint(what string, b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, &CorruptError{What: what, Err: fmt.Errorf("want 8 bytes, have %d", len(b))}
	}
	return binary.BigEndian.Uint64(b), nil
}

// Batch is the write set of one projection commit. Keys are relative to the
// projection; Get and Scan see the Batch's own writes. A Batch is only valid
// inside Apply.
type Batch struct {
	b      *pebble.Batch
	prefix []byte   // projection data prefix: projPrefix(name)+"d"
	after  []func() // AfterCommit's, run by the committer
}

// AfterCommit makes f run once the Batch's rows are committed: readers of
// the view see them when f runs, and f runs before a WaitFor of the
// sequences the commit covers returns. An Apply uses it to tell an
// in-memory reader (a cache) that rows changed. f runs on the Follower's
// goroutine, after the commit and in registration order, so it must be
// quick and must not wait for the view; it never runs when the commit
// fails (the events are applied again into a new Batch) or when the Batch
// is not committed (ApplyInMemory runs it once every event is applied).
func (b *Batch) AfterCommit(f func()) { b.after = append(b.after, f) }

// runAfter runs and forgets the AfterCommit funcs of b.
func (b *Batch) runAfter() {
	for _, f := range b.after {
		f()
	}
	b.after = nil
}

func (b *Batch) key(k []byte) []byte { return joinKey(b.prefix, k) }

// joinKey returns prefix followed by k in a new slice, in one allocation.
func joinKey(prefix, k []byte) []byte {
	return append(append(make([]byte, 0, len(prefix)+len(k)), prefix...), k...)
}

// Set writes key=value.
func (b *Batch) Set(key, value []byte) error { return b.b.Set(b.key(key), value, nil) }

// Delete removes key.
func (b *Batch) Delete(key []byte) error { return b.b.Delete(b.key(key), nil) }

// DeletePrefix removes every key starting with prefix, one point delete
// per key: it is meant for the few rows of one thing (a fiber's ops, a
// message's pieces). A range deletion would be cheaper to write, but every
// later Get of the batch fragments all of the batch's range deletions
// again: over a rebuild's batch of thousands of completed fibers that was
// a third of the rebuild's CPU (go run ./bench -run '^views-rebuild-chunks$').
func (b *Batch) DeletePrefix(prefix []byte) error {
	var keys [][]byte
	for kv, err := range b.Scan(prefix) {
		if err != nil {
			return err
		}
		keys = append(keys, kv.Key)
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// Get returns a copy of key's value, or ErrNotFound.
func (b *Batch) Get(key []byte) ([]byte, error) { return get(b.b, b.key(key)) }

// Has reports whether key has a value, without copying it: the check a
// view makes for a row that holds a fiber's snapshot or a turn.
func (b *Batch) Has(key []byte) (bool, error) {
	_, c, err := b.b.Get(b.key(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("eventlog: get: %w", err)
	}
	return true, c.Close()
}

// Scan yields the rows whose key (relative to the projection) starts with
// prefix, in key order; see View.Scan for how errors are yielded.
func (b *Batch) Scan(prefix []byte) iter.Seq2[KV, error] {
	return scan(b.b, b.prefix, prefix)
}

// KV is one row yielded by a Scan. Its slices are copies owned by the
// caller.
type KV struct {
	Key   []byte `json:"k"`
	Value []byte `json:"v"`
}

func get(r pebble.Reader, key []byte) ([]byte, error) {
	v, c, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("eventlog: get: %w", err)
	}
	defer c.Close()
	return bytes.Clone(v), nil
}

// scan yields the rows of r under base+prefix, and at most one error, last:
// a failed NewIter, an iterator error or a failed Close. A scan that ends
// without an error saw every row.
func scan(r pebble.Reader, base, prefix []byte) iter.Seq2[KV, error] {
	return func(yield func(KV, error) bool) {
		start := joinKey(base, prefix)
		it, err := r.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: prefixEnd(start)})
		if err != nil {
			yield(KV{}, fmt.Errorf("eventlog: scan: %w", err))
			return
		}
		stopped := false
		for ok := it.First(); ok; ok = it.Next() {
			if !yield(KV{Key: bytes.Clone(it.Key()[len(base):]), Value: bytes.Clone(it.Value())}, nil) {
				stopped = true
				break
			}
		}
		// Close returns the iterator's error, if any (it.Error() included).
		if err := it.Close(); err != nil && !stopped {
			yield(KV{}, fmt.Errorf("eventlog: scan: %w", err))
		}
	}
}

// View reads a projection's rows. Reads see committed batches only; use
// Projector.WaitFor to read your own appends. Reads after Log.Close return
// ErrClosed. A View is safe for concurrent use.
type View struct {
	l      *Log
	prefix []byte
}

// View returns the reader of the projection called name.
func (l *Log) View(name string) (*View, error) {
	if l.cfg.Dir == "" {
		return nil, invalidf("no projections: the log was opened without Dir")
	}
	if !ValidToken(name) {
		return nil, invalidf("projection name %q is not a valid token", name)
	}
	return &View{l: l, prefix: append(projPrefix(name), 'd')}, nil
}

// Get returns a copy of key's value, ErrNotFound, or ErrClosed after
// Log.Close.
func (v *View) Get(key []byte) ([]byte, error) {
	db, release, err := v.l.useDB()
	if err != nil {
		return nil, err
	}
	defer release()
	return get(db, joinKey(v.prefix, key))
}

// Scan yields the rows whose key starts with prefix, in key order; the
// yielded slices are copies owned by the caller. A read error (ErrClosed
// after Log.Close, an I/O error) is yielded once, as the last item, with a
// zero KV: a scan that yields no error saw every row, and a caller that
// stops at the first error never mistakes a truncated scan for a complete
// one. Log.Close waits for the scans in progress, so do not close the Log
// from inside the loop.
func (v *View) Scan(prefix []byte) iter.Seq2[KV, error] {
	return func(yield func(KV, error) bool) {
		db, release, err := v.l.useDB()
		if err != nil {
			yield(KV{}, err)
			return
		}
		defer release()
		scan(db, v.prefix, prefix)(yield)
	}
}
