package eventlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// maxApply is the most events committed in one Pebble batch while catching
// up. Each commit still holds the rows and the cursor of every event in it.
const maxApply = 512

// Projector keeps one Projection up to date: it follows the log from the
// stored cursor+1 and commits each group of events' rows together with the
// new cursor in one synced Pebble batch. Create it with NewProjector and run
// it with Run; its other methods are safe for concurrent use.
type Projector struct {
	l      *Log
	p      Projection
	logger *slog.Logger
	keys   struct{ cursor, version, origin, data []byte }
	// origin identifies the stream the projection is built from: its
	// creation time. Set by open, written by drop.
	origin uint64

	ready     chan struct{}
	rebuildCh chan chan error

	mu struct {
		sync.Mutex
		cursor  Seq
		isReady bool
		changed chan struct{} // closed and replaced when cursor moves
		err     error         // set when Run returned: why it stopped
	}
}

// NewProjector prepares p. Names must be unique within the Log.
// Errors: ErrInvalid for a bad name, a missing Apply, a duplicate name or a
// Log without Dir.
func (l *Log) NewProjector(p Projection) (*Projector, error) {
	if l.db == nil {
		return nil, invalidf("projection %q: the log was opened without Dir", p.Name)
	}
	if !ValidToken(p.Name) || p.Apply == nil {
		return nil, invalidf("projection %q: need a token name and an Apply func", p.Name)
	}
	if _, _, err := l.filter(p.Filter); err != nil {
		return nil, fmt.Errorf("projection %q: %w", p.Name, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.projections[p.Name] {
		return nil, invalidf("projection %q registered twice", p.Name)
	}
	l.mu.projections[p.Name] = true
	pr := &Projector{
		l: l, p: p,
		logger:    l.logger.With("subsystem", "projection", "projection", p.Name),
		ready:     make(chan struct{}),
		rebuildCh: make(chan chan error),
	}
	base := projPrefix(p.Name)
	pr.keys.cursor = append(append([]byte{}, base...), 'c')
	pr.keys.version = append(append([]byte{}, base...), 'v')
	pr.keys.origin = append(append([]byte{}, base...), 'o')
	pr.keys.data = append(append([]byte{}, base...), 'd')
	pr.mu.changed = make(chan struct{})
	return pr, nil
}

// Name returns the projection's name.
func (pr *Projector) Name() string { return pr.p.Name }

// Ready is closed once the projection has caught up with the last matching
// event stored when Run started.
func (pr *Projector) Ready() <-chan struct{} { return pr.ready }

// Cursor returns the last stream sequence applied.
func (pr *Projector) Cursor() Seq {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.mu.cursor
}

// WaitFor blocks until the projection has applied sequence seq (an event that
// matches its filter), ctx is done (ctx's error), or Run returned: with
// Run's error, or an error wrapping ErrStopped when Run stopped because its
// ctx ended. A WaitFor before Run started waits for it.
func (pr *Projector) WaitFor(ctx context.Context, seq Seq) error {
	for {
		pr.mu.Lock()
		cur, ch, err := pr.mu.cursor, pr.mu.changed, pr.mu.err
		pr.mu.Unlock()
		if cur >= seq {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Rebuild drops the projection's rows and cursor and replays the log from
// sequence 1. It returns once the drop is committed and the replay started;
// use WaitFor or Cursor to see it progress. Run must be running.
func (pr *Projector) Rebuild(ctx context.Context) error {
	done := make(chan error, 1)
	select {
	case pr.rebuildCh <- done:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run applies events until ctx is done (returning nil) or an Apply or Pebble
// error stops it. Corrupt stored events are skipped: logged, counted in
// forever_eventlog_corrupt_events_total, and the cursor moves past them, so
// the stream, which still holds them, loses nothing.
//
// Once Run returned, WaitFor no longer waits (see WaitFor).
func (pr *Projector) Run(ctx context.Context) error {
	pr.mu.Lock()
	pr.mu.err = nil // a Run after an earlier one returned
	pr.mu.Unlock()
	err := pr.run(ctx)
	if err != nil && ctx.Err() != nil {
		err = nil
	}
	stopped := fmt.Errorf("%w: projection %q", ErrStopped, pr.p.Name)
	if err != nil {
		stopped = fmt.Errorf("projection %q stopped: %w", pr.p.Name, err)
	}
	pr.mu.Lock()
	pr.mu.err = stopped
	close(pr.mu.changed)
	pr.mu.changed = make(chan struct{})
	pr.mu.Unlock()
	return err
}

func (pr *Projector) run(ctx context.Context) error {
	cursor, err := pr.open(ctx)
	if err != nil {
		return err
	}
	for {
		rebuild, err := pr.follow(ctx, cursor)
		if err != nil || rebuild == nil {
			return err
		}
		err = pr.drop()
		if err == nil {
			// Before replying, so a WaitFor after Rebuild waits for the replay.
			cursor = 0
			pr.setCursor(0)
		}
		rebuild <- err
		if err != nil {
			return err
		}
	}
}

// open checks the schema version and that the stored view was built from
// this very stream, drops stale data, and loads the cursor.
//
// A view built from another stream is dropped and rebuilt: one whose stream
// was deleted and created again (its creation time differs), or one whose
// cursor is past the stream's last sequence (the JetStream store was
// replaced, or lost acknowledged writes in a power failure under sync
// interval). Kept, such a view would hold events the log no longer has and
// skip the new events that reuse their sequences.
func (pr *Projector) open(ctx context.Context) (Seq, error) {
	_, stream, err := pr.l.filter(pr.p.Filter)
	if err != nil {
		return 0, err
	}
	info, err := pr.l.stream(stream).Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("projection %q: stream info: %w", pr.p.Name, err)
	}
	pr.origin = uint64(info.Created.UnixNano())
	last := Seq(info.State.LastSeq)

	release, err := pr.l.useDB()
	if err != nil {
		return 0, err
	}
	defer release()
	db := pr.l.db
	v, err := get(db, pr.keys.version)
	switch {
	case errors.Is(err, ErrNotFound):
		// New projection, or one whose Pebble data was deleted.
		return 0, pr.drop()
	case err != nil:
		return 0, err
	}
	stored, derr := decodeUint("schema version of "+pr.p.Name, v)
	if derr != nil || stored != uint64(pr.p.Version) {
		pr.logger.Info("projection schema changed, rebuilding from the log", "stored", stored, "version", pr.p.Version)
		return 0, pr.drop()
	}
	cur, err := pr.loadCursor()
	if err != nil {
		return 0, err
	}
	o, err := get(db, pr.keys.origin)
	switch {
	case errors.Is(err, ErrNotFound):
		// Stored before origins were recorded: adopt this stream.
		if err := pr.l.db.Set(pr.keys.origin, encodeUint(pr.origin), pebble.Sync); err != nil {
			return 0, err
		}
	case err != nil:
		return 0, err
	default:
		if origin, derr := decodeUint("stream origin of "+pr.p.Name, o); derr != nil || origin != pr.origin {
			pr.logger.Warn("projection was built from another stream (deleted and created again), rebuilding from the log", "stream", stream)
			return 0, pr.drop()
		}
	}
	if cur > last {
		pr.logger.Warn("projection is ahead of its stream (store replaced, or acknowledged writes lost), rebuilding from the log",
			"stream", stream, "cursor", cur, "last", last)
		return 0, pr.drop()
	}
	pr.setCursor(cur)
	return cur, nil
}

// loadCursor reads the stored cursor, 0 when there is none.
func (pr *Projector) loadCursor() (Seq, error) {
	c, err := get(pr.l.db, pr.keys.cursor)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	cur, err := decodeUint("cursor of "+pr.p.Name, c)
	if err != nil {
		return 0, err
	}
	return Seq(cur), nil
}

// drop deletes rows and cursor and records the schema version and the
// stream's origin, in one synced batch.
func (pr *Projector) drop() error {
	release, err := pr.l.useDB()
	if err != nil {
		return err
	}
	defer release()
	b := pr.l.db.NewBatch()
	defer b.Close()
	base := projPrefix(pr.p.Name)
	if err := b.DeleteRange(base, prefixEnd(base), nil); err != nil {
		return err
	}
	if err := b.Set(pr.keys.version, encodeUint(uint64(pr.p.Version)), nil); err != nil {
		return err
	}
	if err := b.Set(pr.keys.origin, encodeUint(pr.origin), nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("drop projection %q: %w", pr.p.Name, err)
	}
	return nil
}

// follow applies events after cursor until ctx ends (nil, nil), an error, or
// a rebuild request (returned to the caller, which drops and calls again).
func (pr *Projector) follow(ctx context.Context, cursor Seq) (chan error, error) {
	subject, stream, err := pr.l.filter(pr.p.Filter)
	if err != nil {
		return nil, err
	}
	target, err := pr.l.lastSeq(ctx, stream, subject)
	if err != nil {
		return nil, err
	}
	if cursor >= target {
		pr.markReady()
	}
	fctx, cancel := context.WithCancel(ctx)
	ch := make(chan followed, maxApply)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(ch)
		after := cursor
		// The ordered consumer resets itself on gaps and reconnects; if its
		// iterator ends anyway, start a new one after the last delivered event.
		for fctx.Err() == nil {
			for e, err := range pr.l.follow(fctx, stream, subject, after) {
				var ce *CorruptError
				if err != nil && !errors.As(err, &ce) {
					if fctx.Err() != nil {
						return
					}
					pr.logger.Warn("follow", "err", err)
					break
				}
				select {
				case ch <- followed{e, err}:
					after = e.Seq
				case <-fctx.Done():
					return
				}
			}
			select {
			case <-time.After(100 * time.Millisecond):
			case <-fctx.Done():
			}
		}
	}()
	defer wg.Wait()
	defer cancel()

	group := make([]followed, 0, maxApply)
	for {
		group = group[:0]
		select {
		case <-ctx.Done():
			return nil, nil
		case done := <-pr.rebuildCh:
			cancel()
			wg.Wait()
			return done, nil
		case it, ok := <-ch:
			if !ok {
				return nil, ctx.Err()
			}
			group = append(group, it)
		}
	drain:
		for len(group) < maxApply {
			select {
			case it, ok := <-ch:
				if !ok {
					break drain
				}
				group = append(group, it)
			default:
				break drain
			}
		}
		last, err := pr.commitGroup(group)
		if err != nil {
			return nil, err
		}
		pr.l.metrics.lag.WithLabelValues(pr.p.Name).Set(float64(last.Pending))
		if last.Seq >= target || last.Pending == 0 {
			pr.markReady()
		}
	}
}

// followed is an event the follow goroutine hands to the apply loop, with
// its decode error.
type followed struct {
	e   Event
	err error
}

// commitGroup applies a group of events and the new cursor in one synced
// batch.
func (pr *Projector) commitGroup(group []followed) (Event, error) {
	release, err := pr.l.useDB()
	if err != nil {
		return Event{}, err
	}
	defer release()
	b := pr.l.db.NewIndexedBatch()
	defer b.Close()
	pb := &Batch{b: b, prefix: pr.keys.data}
	var last Event
	for _, it := range group {
		e, derr := it.e, it.err
		last = e
		if derr != nil {
			pr.l.metrics.corrupt.WithLabelValues(pr.p.Name).Inc()
			pr.logger.Error("skipping corrupt event", "seq", e.Seq, "subject", e.Subject, "err", derr)
			continue
		}
		if err := pr.p.Apply(pb, e); err != nil {
			return Event{}, fmt.Errorf("apply %s at seq %d: %w", e.Type, e.Seq, err)
		}
	}
	if err := b.Set(pr.keys.cursor, encodeUint(uint64(last.Seq)), nil); err != nil {
		return Event{}, err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return Event{}, fmt.Errorf("commit projection %q at seq %d: %w", pr.p.Name, last.Seq, err)
	}
	pr.setCursor(last.Seq)
	return last, nil
}

func (pr *Projector) setCursor(s Seq) {
	pr.mu.Lock()
	pr.mu.cursor = s
	close(pr.mu.changed)
	pr.mu.changed = make(chan struct{})
	pr.mu.Unlock()
	pr.l.metrics.cursor.WithLabelValues(pr.p.Name).Set(float64(s))
}

func (pr *Projector) markReady() {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if !pr.mu.isReady {
		pr.mu.isReady = true
		close(pr.ready)
		pr.logger.Info("projection ready", "cursor", pr.mu.cursor)
	}
}
