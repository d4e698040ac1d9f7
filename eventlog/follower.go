package eventlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/forever-agents/forever/internal/backoff"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// maxApply is the most events committed in one Pebble batch while catching
// up. Each commit still holds the rows and the cursors of every event in it.
const maxApply = 512

// Follower keeps several projections of one JetStream stream up to date with
// one ordered consumer: it reads each event once, applies it to every
// projection whose Filter matches, and commits a group of events' rows of
// every projection together with their cursors in one synced Pebble batch.
// Read-your-writes then waits on one cursor (WaitFor) however many views
// there are, and rebuilding them all reads the stream once.
//
// Create it with Log.NewFollower, register projections with Add, then run it
// with Run. Its other methods are safe for concurrent use.
//
// Every projection keeps its own stored cursor, version and origin, written
// in the same batch as its rows, so each view on its own still satisfies the
// package invariants and the Pebble layout is the one a Projector writes: a
// view can move between a Projector and a Follower without a rebuild. In
// steady state all cursors are equal. A view that is behind the others (new,
// its Version changed, built from another stream, or rebuilt with Rebuild)
// catches up alone, from its cursor to the others', before the Follower
// resumes following with all of them: the others wait meanwhile (their
// WaitFor included), which at catch-up speed costs about a second per 200k
// events of the stream.
type Follower struct {
	l         *Log
	ready     chan struct{}
	rebuildCh chan rebuildReq

	// Set by Add before Run, read-only once Run started.
	stream  string    // the JetStream stream every projection reads
	wide    string    // every subject of stream
	members []*member // in Add order
	// Of a log with several shards (followshards.go): shards are the
	// Follower's shard followers, one per shard stream, each with its own
	// copy of the members; parent is a shard follower's Follower; shard is
	// its shard.
	shards []*Follower
	parent *Follower
	shard  int
	// applyMu, of a Follower with shards, makes its shard followers'
	// commits one at a time: a view's rows are never read and written by
	// two commits at once.
	applyMu sync.Mutex
	// drops counts the drops of a Follower with shards (open's pass
	// starts over when a shard dropped a view). Owned by Run's goroutine.
	drops int
	// noDrop, of a shard follower, makes a drop fail with errDropAll: set
	// while it opens alone, its siblings consuming (followshards.go).
	// Owned by its parent's Run goroutine.
	noDrop bool
	// written, of a shard follower, is the highest cursor it committed in
	// this process: a stored cursor of its views past both this and the
	// stream's last sequence when last asked is past the stream's end
	// (openInfo). Written by its commits, read by its parent's retake
	// once its run ended.
	written Seq
	// Set by Run.
	logger *slog.Logger
	origin uint64 // the stream's creation time
	// reset is closed when RestartViews asks the Follower to start over;
	// rebuilt is how many rebuilds it has done of those RestartViews asked.
	reset   <-chan struct{}
	rebuilt uint64
	// renew, of a shard follower, asks its consumer to be recreated from
	// the last applied event: a wait for it saw no progress for
	// renewAfter while behind (ownedviews.go's waitShardOwned).
	renew chan struct{}

	mu struct {
		sync.Mutex
		started bool
		cursor  Seq // the lowest cursor of the projections
		isReady bool
		changed chan struct{} // closed and replaced when cursor or life moves
		life    int           // counts the starts from the stored cursors
		err     error         // set when Run returned: why it stopped
		// rebuilds counts the rebuilds RestartViews asked that were done.
		rebuilds uint64
		// idle, of an owned-views shard follower, is set while its
		// consumer delivered every event stored when it sent its last;
		// gen, of an owned-views Follower, is the generation of the
		// followed partitions it took (ownedviews.go).
		idle bool
		gen  uint64
		// starts counts the lives of a shard follower (each a restart of
		// its consumer from the stored cursors).
		starts int
	}
}

// member is one projection of a Follower.
type member struct {
	p       Projection
	subject string // the subject its Filter selects
	all     bool   // subject is every subject of the stream
	part    int    // of an owned-views member, its partition
	keys    struct{ cursor, version, origin, data []byte }
	cursor  Seq   // owned by Run's goroutine
	batch   Batch // reused by commit
	applied int   // events applied by the commit in progress
	// gauges is the view's cursor gauge and applied counter, looked up by
	// commit once: a lookup by label at every commit of every view was
	// 4% of the commits' CPU.
	gauges *memberGauges
	// lag is the view's lag gauge in its follower's stream, looked up by
	// setLag once a life of the follower (clearLag deletes the series and
	// drops it).
	lag prometheus.Gauge
}

type memberGauges struct {
	cursor  prometheus.Gauge
	applied prometheus.Counter
}

// metricsOf returns m's gauges. REQUIRES: called by m's committer.
func (f *Follower) metricsOf(m *member) *memberGauges {
	if m.gauges == nil {
		m.gauges = &memberGauges{cursor: f.l.metrics.cursor.WithLabelValues(m.p.Name), applied: f.l.metrics.applied.WithLabelValues(m.p.Name)}
	}
	return m.gauges
}

type rebuildReq struct {
	name string
	done chan error
	// owned, of a Follower with shards, is no rebuild: the followed
	// partitions changed (ownedviews.go).
	owned bool
}

// followed is an event the follow goroutine hands to the apply loop, with
// its decode error.
type followed struct {
	e   Event
	err error
}

// NewFollower returns an empty Follower. Errors: ErrInvalid for a Log
// without Dir.
func (l *Log) NewFollower() (*Follower, error) {
	if l.cfg.Dir == "" {
		return nil, invalidf("follower: the log was opened without Dir")
	}
	f := &Follower{l: l, ready: make(chan struct{}), rebuildCh: make(chan rebuildReq)}
	f.mu.changed = make(chan struct{})
	if l.cfg.Shards > 0 {
		for k := range l.cfg.Shards {
			s := &Follower{l: l, ready: make(chan struct{}), rebuildCh: make(chan rebuildReq), parent: f, shard: k, renew: make(chan struct{}, 1)}
			s.mu.changed = make(chan struct{})
			f.shards = append(f.shards, s)
		}
	}
	return f, nil
}

// Add registers p; call it before Run. Every projection of a Follower reads
// the same JetStream stream (the events stream, or with Filter.Chunks or
// Filter.Stream the chunks stream), and names are unique within the Log.
// Errors: ErrInvalid for a bad name, a missing Apply, a duplicate name, a
// projection of the other stream, or a Follower already run.
func (f *Follower) Add(p Projection) error {
	if !ValidToken(p.Name) || p.Apply == nil {
		return invalidf("projection %q: need a token name and an Apply func", p.Name)
	}
	subject, stream, err := f.l.filter(p.Filter)
	if err != nil {
		return fmt.Errorf("projection %q: %w", p.Name, err)
	}
	chunks := f.l.handleOf(stream).chunks
	wide, _, _ := f.l.filter(Filter{Chunks: chunks})
	if f.shards != nil {
		// Every shard's stream: the Follower is named by their base.
		stream = f.l.cfg.EventsStream
		if chunks {
			stream = f.l.cfg.ChunksStream
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.started {
		return invalidf("projection %q: add to a follower that already ran", p.Name)
	}
	if f.stream != "" && f.stream != stream {
		return invalidf("projection %q reads stream %s, the follower's others read %s", p.Name, stream, f.stream)
	}
	f.l.mu.Lock()
	defer f.l.mu.Unlock()
	if _, dup := f.l.mu.projections[p.Name]; dup {
		return invalidf("projection %q registered twice", p.Name)
	}
	f.l.mu.projections[p.Name] = registered{p: p, f: f, events: !chunks}
	f.stream, f.wide = stream, wide
	f.members = append(f.members, newMember(p, subject, wide, ""))
	for k, s := range f.shards {
		s.stream, s.wide = f.l.streamNames(chunks)[k], wide
		if !f.l.cfg.OwnedViews {
			// With owned views, Run gives each shard follower its
			// members from the followed partitions (takeParts).
			s.members = append(s.members, newMember(p, subject, wide, strconv.Itoa(k)))
		}
	}
	return nil
}

// newMember returns the member of projection p that reads subject of a
// stream whose every subject is wide. A shard follower's member keeps its
// cursor and origin under keys of its shard (suffix): the shards share
// the view's rows and version.
func newMember(p Projection, subject, wide, suffix string) *member {
	m := &member{p: p, subject: subject, all: subject == wide}
	base := projPrefix(p.Name)
	m.keys.cursor = append(append(append([]byte{}, base...), 'c'), suffix...)
	m.keys.version = append(append([]byte{}, base...), 'v')
	m.keys.origin = append(append(append([]byte{}, base...), 'o'), suffix...)
	m.keys.data = append(append([]byte{}, base...), 'd')
	return m
}

// Names returns the names of the projections added, in Add order. The caller
// owns the slice.
func (f *Follower) Names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := make([]string, len(f.members))
	for i, m := range f.members {
		names[i] = m.p.Name
	}
	return names
}

// Ready is closed once every projection has caught up with the last event
// stored when Run started (or when the views behind caught up with the
// others, if that was later).
func (f *Follower) Ready() <-chan struct{} { return f.ready }

// Rebuilds returns how many of the rebuilds Log.RestartViews asked for
// its stream the Follower did (it dropped its views; WaitFor then waits
// for their replay). It counts from the Log's start, like RestartViews.
func (f *Follower) Rebuilds() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.rebuilds
}

// Stream returns the name of the JetStream stream the projections read
// (empty before Add).
func (f *Follower) Stream() string { return f.stream }

// Cursor returns the last stream sequence applied by every projection: the
// lowest of their cursors. A log with several shards has no one cursor:
// Cursor returns 0 there, and Cursors each shard's (WaitFor takes a Seq
// of any shard, and Changed tells when any moves).
func (f *Follower) Cursor() Seq {
	if f.shards != nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.cursor
}

// Cursors returns the cursor of each shard, in shard order (each a Seq
// naming its shard, ShardOf): Cursor alone for an unsharded log. The
// caller owns the slice.
func (f *Follower) Cursors() []Seq {
	if f.shards == nil {
		return []Seq{f.Cursor()}
	}
	out := make([]Seq, len(f.shards))
	for k, s := range f.shards {
		out[k] = s.Cursor()
	}
	return out
}

// WaitFor blocks until every projection has applied sequence seq (an event
// of the stream they read), ctx is done (ctx's error), or Run returned: with
// Run's error, or an error wrapping ErrStopped when Run stopped because its
// ctx ended. While Pebble cannot write it keeps waiting (the work that
// waits pauses until the views resume): a caller that must not wait checks
// Log.Stalled first. A WaitFor before Run started waits for it.
func (f *Follower) WaitFor(ctx context.Context, seq Seq) error {
	if f.shards != nil && f.owning() {
		return f.waitOwned(ctx, seq)
	}
	if f.shards != nil {
		return f.waitShards(ctx, seq)
	}
	return f.await(ctx, func() bool { return f.mu.cursor >= seq })
}

// await waits until done, called with f.mu held, holds. It returns nil
// then, f's error if f stopped first, or ctx's; it looks again each time
// something of f moves (f.mu.changed).
func (f *Follower) await(ctx context.Context, done func() bool) error {
	for {
		f.mu.Lock()
		ok, ch, err := done(), f.mu.changed, f.mu.err
		f.mu.Unlock()
		if ok {
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

// WaitDurable is WaitFor, and then makes what every projection applied
// durable (a Pebble WAL sync, unless the background sync made it already):
// after a crash, even one that drops every unsynced write below the page
// cache, the views' stored cursors cover seq. WaitFor alone makes the rows
// visible; their sync follows within viewSyncDelay.
func (f *Follower) WaitDurable(ctx context.Context, seq Seq) error {
	for {
		if err := f.WaitFor(ctx, seq); err != nil {
			return err
		}
		f.mu.Lock()
		life := f.mu.life
		f.mu.Unlock()
		err := f.l.syncViews(ctx)
		if !errors.Is(err, ErrViewsStalled) {
			return err
		}
		// Pebble failed: what was applied may be lost with it. Wait until
		// Run starts over from the stored cursors, then wait again.
		if err := f.await(ctx, func() bool { return f.mu.life != life }); err != nil {
			return err
		}
	}
}

// Rebuild drops the rows and cursor of the projection called name, and
// replays the log for it alone from sequence 1 up to the others' cursor;
// then the Follower goes on with all of them. It returns once the drop is
// committed; WaitFor then waits for the replay too. Run must be running.
// Errors: ErrInvalid when no projection of f is called name, a Pebble
// error, or ctx's.
func (f *Follower) Rebuild(ctx context.Context, name string) error {
	if !slices.Contains(f.Names(), name) {
		return invalidf("rebuild: no projection %q in this follower", name)
	}
	done := make(chan error, 1)
	select {
	case f.rebuildCh <- rebuildReq{name: name, done: done}:
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

// what names the follower in errors.
func (f *Follower) what() string {
	if len(f.members) == 1 {
		return fmt.Sprintf("projection %q", f.members[0].p.Name)
	}
	names := make([]string, len(f.members))
	for i, m := range f.members {
		names[i] = m.p.Name
	}
	return "projections " + strings.Join(names, ",")
}

// Run applies events until ctx is done (returning nil) or an Apply or Pebble
// error stops it. Corrupt stored events are skipped: logged, counted in
// forever_eventlog_corrupt_events_total for each projection they would have
// reached, and the cursors move past them, so the stream, which still holds
// them, loses nothing. Errors: ErrInvalid when no projection was added.
//
// Once Run returned, WaitFor no longer waits (see WaitFor).
func (f *Follower) Run(ctx context.Context) error {
	f.mu.Lock()
	f.mu.started = true
	f.mu.err = nil // a Run after an earlier one returned
	f.mu.Unlock()
	if len(f.members) == 0 {
		return invalidf("follower: no projection added")
	}
	if len(f.members) == 1 {
		f.logger = f.l.logger.With("subsystem", "projection", "projection", f.members[0].p.Name)
	} else {
		f.logger = f.l.logger.With("subsystem", "projection", "stream", f.stream, "projections", strings.Join(f.Names(), ","))
	}
	_, f.rebuilt = f.l.resetOf(f.stream)
	f.mu.Lock()
	f.mu.rebuilds = f.rebuilt
	f.mu.Unlock()
	var err error
	if f.shards != nil {
		err = f.runShards(ctx)
	} else {
		err = f.run(ctx)
	}
	if err != nil && ctx.Err() != nil {
		err = nil
	}
	stopped := fmt.Errorf("%w: %s", ErrStopped, f.what())
	if err != nil {
		stopped = fmt.Errorf("%s stopped: %w", f.what(), err)
	}
	f.stopShards(stopped)
	f.mu.Lock()
	f.mu.err = stopped
	f.bumpLocked()
	f.mu.Unlock()
	return err
}

// run follows until ctx ends or an error stops it. When Pebble fails a
// write, it stalls until Pebble was reopened, then starts over from the
// stored cursors: the events of the failed commit are still in the stream.
// When JetStream does not answer in time or is unavailable (a leader
// election, a loaded cluster at start), it starts over after a backoff
// instead of stopping the daemon.
func (f *Follower) run(ctx context.Context) error {
	for failures := 0; ; {
		var err error
		if f.shards != nil {
			err = f.followShards(ctx)
		} else {
			err = f.follow(ctx)
		}
		switch {
		case errors.Is(err, errRestart):
			failures = 0
			f.logger.Info("projections start over from their cursors: the stream was restored or purged, or they had stalled")
		case errors.Is(err, ErrViewsStalled):
			if err := f.l.awaitDB(ctx); err != nil {
				return err
			}
			f.logger.Info("projections resume after Pebble wrote again")
		case ctx.Err() == nil && (Transient(err) || errors.Is(err, jetstream.ErrStreamNotFound)):
			// A missing stream is created again by its owner (agentd's
			// guard), and the views then follow the new one.
			wait := backoff.Exp(100*time.Millisecond, 5*time.Second, failures)
			failures++
			f.logger.Warn("projections wait for JetStream; retrying", "err", err, "in", wait, "attempt", failures)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		default:
			return err
		}
	}
}

// Transient reports whether err is JetStream being slow or unavailable
// rather than a fault of the log: a request that timed out (its own
// deadline; check the caller's context first), no responders, a cluster
// without a leader. Reads that fail so may be retried.
func Transient(err error) bool {
	return Unavailable(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}

// errRestart ends a life of the follower when RestartViews asks it to
// start over.
var errRestart = errors.New("eventlog: projections asked to start over")

// follow is one life of run, from the stored cursors.
func (f *Follower) follow(ctx context.Context) error {
	reset, rebuild := f.l.resetOf(f.stream)
	f.reset = reset
	if err := f.open(ctx); err != nil {
		return err
	}
	if rebuild != f.rebuilt {
		f.logger.Warn("projections rebuilt from the stream as it is now (its events were removed)", "stream", f.stream)
		for _, m := range f.members {
			if err := f.drop(m); err != nil {
				return err
			}
			m.cursor = 0
		}
		f.rebuilt = rebuild
		f.mu.Lock()
		f.mu.rebuilds = rebuild
		f.mu.Unlock()
	}
	f.publish()
	f.mu.Lock()
	f.mu.life++
	f.bumpLocked()
	f.mu.Unlock()
	for {
		if err := f.bootstrap(ctx); err != nil {
			return err
		}
		if err := f.catchUp(ctx); err != nil {
			return err
		}
		req, err := f.consume(ctx, f.members, f.head(), 0)
		if err != nil || req == nil {
			return err
		}
		m := f.member(req.name)
		err = f.drop(m)
		if err == nil {
			// Before replying, so a WaitFor after Rebuild waits for the replay.
			m.cursor = 0
			f.publish()
		}
		req.done <- err
		if err != nil {
			return err
		}
	}
}

// bootstrap builds each projection that starts from nothing (cursor 0)
// and has a Bootstrap from what that reads, instead of a replay: the rows
// and the cursor go into one synced batch.
func (f *Follower) bootstrap(ctx context.Context) error {
	for _, m := range f.members {
		if m.cursor != 0 || m.p.Bootstrap == nil {
			continue
		}
		start := time.Now()
		write, upto, err := m.p.Bootstrap(ctx, f.l)
		if err != nil {
			return fmt.Errorf("projection %q: bootstrap: %w", m.p.Name, err)
		}
		if upto == 0 {
			continue // an empty stream: nothing to skip
		}
		if err := f.commitBootstrap(m, write, upto); err != nil {
			return err
		}
		f.logger.Info("projection bootstrapped", "projection", m.p.Name, "cursor", upto, "took", time.Since(start))
	}
	f.publish()
	return nil
}

// commitBootstrap writes m's bootstrapped rows and its cursor upto.
func (f *Follower) commitBootstrap(m *member, write func(b *Batch) error, upto Seq) error {
	db, release, err := f.l.useDB()
	if err != nil {
		return err
	}
	defer release()
	b := db.NewIndexedBatch()
	defer b.Close()
	m.batch = Batch{b: b, prefix: m.keys.data}
	if err := write(&m.batch); err != nil {
		return fmt.Errorf("projection %q: bootstrap: %w", m.p.Name, err)
	}
	if err := b.Set(m.keys.cursor, encodeUint(uint64(upto)), nil); err != nil {
		return err
	}
	if err := f.l.commitView(b); err != nil {
		return fmt.Errorf("commit bootstrap of projection %q at seq %d: %w", m.p.Name, upto, err)
	}
	m.batch.runAfter()
	m.cursor = upto
	f.l.metrics.cursor.WithLabelValues(m.p.Name).Set(float64(upto))
	return nil
}

func (f *Follower) member(name string) *member {
	for _, m := range f.members {
		if m.p.Name == name {
			return m
		}
	}
	return nil
}

// head returns the highest cursor: where the projections that are caught up
// stand.
func (f *Follower) head() Seq {
	var h Seq
	for _, m := range f.members {
		h = max(h, m.cursor)
	}
	return h
}

// catchUp brings the projections behind up to the head, the lowest ones
// first: each step replays the events from the lowest cursor up to the next
// one for the projections at the lowest, which then join the next.
func (f *Follower) catchUp(ctx context.Context) error {
	target := f.head()
	for {
		lo := target
		for _, m := range f.members {
			lo = min(lo, m.cursor)
		}
		if lo >= target {
			return nil
		}
		next := target
		var group []*member
		for _, m := range f.members {
			if m.cursor == lo {
				group = append(group, m)
			} else {
				next = min(next, m.cursor)
			}
		}
		f.logger.Info("projection behind the others, catching up", "behind", names(group), "from", lo, "to", next)
		if _, err := f.consume(ctx, group, lo, next); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func names(ms []*member) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = m.p.Name
	}
	return strings.Join(s, ",")
}

// open checks each projection's schema version and that its stored view was
// built from this very stream, drops stale ones, and loads the cursors.
//
// A view built from another stream is dropped and rebuilt: one whose stream
// was deleted and created again (its creation time differs), or one whose
// cursor is past the stream's last sequence (the JetStream store was
// replaced, or lost acknowledged writes in a power failure under sync
// interval). Kept, such a view would hold events the log no longer has and
// skip the new events that reuse their sequences.
func (f *Follower) open(ctx context.Context) error {
	if len(f.members) == 0 {
		return nil // an owned-views shard follower with no partition
	}
	last, err := f.openInfo(ctx)
	if err != nil {
		return err
	}
	db, release, err := f.l.useDB()
	if err != nil {
		return err
	}
	defer release()
	for _, m := range f.members {
		if m.cursor, err = f.openMember(db, m, last); err != nil {
			return err
		}
	}
	return nil
}

// openInfo sets f.origin, the stream's creation time, and returns the
// bound past which a stored cursor is past the stream's end: its last
// sequence, from the stream's info.
//
// A retake (noDrop: a shard follower opened again alone, the followed
// partitions changed, in a life whose first open read the info) takes the
// info cached then, and the bound as the higher of its last sequence and
// the highest cursor this shard follower committed since (written): every
// cursor stored before the info was read is at most its last sequence,
// and every one since was committed here. Asked again, the info took 5 s
// to time out while the stream elected a leader (the partitions changed
// just after a node's death), and the new owner's recoveries waited for
// it (chaos runs, stop 58). A bound still too low only refuses a drop,
// which opens every shard again with the info asked afresh.
func (f *Follower) openInfo(ctx context.Context) (Seq, error) {
	if f.noDrop && f.origin != 0 {
		if info := f.l.stream(f.stream).CachedInfo(); info != nil && uint64(info.Created.UnixNano()) == f.origin {
			return max(f.l.seqOf(f.stream, info.State.LastSeq), f.written), nil
		}
	}
	info, err := f.l.streamInfo(ctx, f.stream)
	if err != nil {
		return 0, fmt.Errorf("%s: stream info: %w", f.what(), err)
	}
	f.origin = uint64(info.Created.UnixNano())
	return f.l.seqOf(f.stream, info.State.LastSeq), nil
}

// openMember is open for one projection. REQUIRES: db in use (useDB).
func (f *Follower) openMember(db *pebble.DB, m *member, last Seq) (Seq, error) {
	logger := f.logger.With("projection", m.p.Name)
	v, err := get(db, m.keys.version)
	switch {
	case errors.Is(err, ErrNotFound):
		// New projection, or one whose Pebble data was deleted.
		return 0, f.drop(m)
	case err != nil:
		return 0, err
	}
	stored, derr := decodeUint("schema version of "+m.p.Name, v)
	if derr != nil || stored != uint64(m.p.Version) {
		logger.Info("projection schema changed, rebuilding from the log", "stored", stored, "version", m.p.Version)
		return 0, f.drop(m)
	}
	if f.owning() {
		if err := f.markOwned(db, m); err != nil {
			return 0, err
		}
	} else if owned, err := markedOwned(db, m); err != nil {
		return 0, err
	} else if owned {
		logger.Info("projection was kept with owned views (each partition at its own point), rebuilding from the log")
		return 0, f.drop(m)
	}
	cur, err := m.loadCursor(db)
	if err != nil {
		return 0, err
	}
	o, err := get(db, m.keys.origin)
	switch {
	case errors.Is(err, ErrNotFound):
		// Stored before origins were recorded: adopt this stream.
		b := db.NewBatch()
		defer b.Close()
		if err := b.Set(m.keys.origin, encodeUint(f.origin), nil); err != nil {
			return 0, err
		}
		if err := f.l.commitView(b); err != nil {
			return 0, err
		}
	case err != nil:
		return 0, err
	default:
		if origin, derr := decodeUint("stream origin of "+m.p.Name, o); derr != nil || origin != f.origin {
			logger.Warn("projection was built from another stream (deleted and created again), rebuilding from the log", "stream", f.stream)
			return 0, f.drop(m)
		}
	}
	if cur > last {
		logger.Warn("projection is ahead of its stream (store replaced, or acknowledged writes lost), rebuilding from the log",
			"stream", f.stream, "cursor", cur, "last", last)
		return 0, f.drop(m)
	}
	return cur, nil
}

// loadCursor reads the stored cursor, 0 when there is none.
func (m *member) loadCursor(db pebble.Reader) (Seq, error) {
	c, err := get(db, m.keys.cursor)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	cur, err := decodeUint("cursor of "+m.p.Name, c)
	if err != nil {
		return 0, err
	}
	return Seq(cur), nil
}

// drop deletes m's rows and cursor and records its schema version and the
// stream's origin, in one synced batch.
func (f *Follower) drop(m *member) error {
	if f.noDrop {
		return fmt.Errorf("%w: projection %q", errDropAll, m.p.Name)
	}
	db, release, err := f.l.useDB()
	if err != nil {
		return err
	}
	defer release()
	b := db.NewBatch()
	defer b.Close()
	base := projPrefix(m.p.Name)
	if err := b.DeleteRange(base, prefixEnd(base), nil); err != nil {
		return err
	}
	if err := b.Set(m.keys.version, encodeUint(uint64(m.p.Version)), nil); err != nil {
		return err
	}
	if err := b.Set(m.keys.origin, encodeUint(f.origin), nil); err != nil {
		return err
	}
	if err := f.l.commitView(b); err != nil {
		return fmt.Errorf("drop projection %q: %w", m.p.Name, err)
	}
	if f.parent != nil {
		f.parent.drops++ // in the parent's goroutine: see openShards
	}
	// A Rebuild returns once its drop is durable.
	return f.l.syncViews(context.Background())
}

// consume applies to group the events after sequence after. With upto 0 it
// follows the stream live until ctx ends (nil, nil), an error, or a rebuild
// request (returned to the caller, which drops and calls again). With upto
// set it stops once every event up to upto was applied, and leaves group's
// cursors at upto.
func (f *Follower) consume(ctx context.Context, group []*member, after, upto Seq) (*rebuildReq, error) {
	subjects := f.subjectsOf(group)
	clk := newCatchUpClock(upto)
	defer func() { clk.report(f.logger, names(group), after, upto) }()
	t0 := time.Now()
	target, err := f.lastSeqOf(ctx, subjects)
	clk.readSince(t0)
	if err != nil {
		return nil, err
	}
	if upto == 0 {
		f.setIdle(after >= target)
		if after >= target {
			// Nothing stored past the cursor: no lag, whatever the last
			// catch-up's last event counted.
			f.setLag(group, 0)
		}
	}
	rebuilds := f.rebuildCh
	breaks := f.l.breaks()
	if upto > 0 {
		rebuilds = nil // a catch-up runs to its end
		// No event matching subject after target exists before upto: new
		// events come after the stream's last, which upto (a cursor of this
		// stream) does not exceed.
		target = min(target, upto)
		if target <= after {
			return nil, f.commit(group, nil, upto)
		}
	} else if after >= target {
		f.markReady()
	}
	var (
		cancel   context.CancelFunc
		ch       chan followed
		wg       sync.WaitGroup
		pumpedAt time.Time // when the consumer read from was created
	)
	// pumpFrom starts reading the stream after seq on a consumer of its
	// own.
	pumpFrom := func(seq Seq) {
		pumpedAt = time.Now()
		var fctx context.Context
		fctx, cancel = context.WithCancel(ctx)
		ch = make(chan followed, maxApply)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(ch)
			f.pump(fctx, subjects, seq, ch)
		}()
	}
	pumpFrom(after)
	defer wg.Wait()
	defer func() { cancel() }()
	at := after // the last event committed
	// renewFrom recreates the consumer after the last event committed.
	renewFrom := func(why string) {
		f.logger.Info(why, "behind", names(group), "at", at, "after", renewAfter, "placed_on", f.l.placedOn(f.stream))
		clk.renewed()
		f.l.metrics.consumerRenewals.Inc()
		cancel()
		wg.Wait()
		pumpFrom(at)
	}
	// A catch-up knows that events up to target are stored: a consumer
	// that delivers none of them for renewAfter is recreated. JetStream
	// places it on any replica of the stream, and one on a replica still
	// catching up itself (its node just restarted) waits until that
	// replica has the events: in a 6-node chaos run a restarted node's
	// startup catch-up waited so 20 s, and every partition handed to it
	// with it (TestCatchUpPastAQuietConsumer).
	var quietT *time.Timer
	var quiet <-chan time.Time
	if upto > 0 {
		quietT = time.NewTimer(renewAfter)
		defer quietT.Stop()
		quiet = quietT.C
	}

	items := make([]followed, 0, maxApply)
	behind := false // a catch-up told its replica is behind (logged once)
	for {
		items = items[:0]
		if quietT != nil {
			quietT.Reset(renewAfter) // a wait for the consumer begins
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-f.reset:
			return nil, errRestart
		case req := <-rebuilds:
			cancel()
			wg.Wait()
			return &req, nil
		case <-breaks:
			// A background sync failed: what was applied since the last
			// one may be lost. Start over from the stored cursors.
			return nil, fmt.Errorf("%w: %s", ErrViewsStalled, "the views' sync failed")
		case <-f.renew:
			// A consumer that delivers nothing while events are stored
			// (one the library keeps, since its server still sends
			// heartbeats, or one placed where its stream elects): a new
			// one from the last event committed. Every recovery waiting
			// on this shard asks, each after its own renewAfter: one
			// younger than that is given its time (a chaos run renewed
			// one shard's consumer four times in 30 ms, stop 62).
			if time.Since(pumpedAt) < renewAfter {
				continue
			}
			renewFrom("a recovery waits on this shard's views and its consumer delivered nothing; recreating the consumer")
			continue
		case <-quiet:
			renewFrom("catch-up consumer delivered nothing; recreating it")
			continue
		case it, ok := <-ch:
			if !ok {
				return nil, ctx.Err()
			}
			items = append(items, it)
		}
	drain:
		for len(items) < maxApply {
			select {
			case it, ok := <-ch:
				if !ok {
					break drain
				}
				items = append(items, it)
			default:
				break drain
			}
		}
		clk.delivered(len(items))
		if upto > 0 {
			// Stop at target, or when nothing more was stored (the event at
			// target was removed meanwhile).
			n := 0
			for n < len(items) && items[n].e.Seq <= target {
				n++
			}
			last := items[max(n-1, 0)].e
			if n < len(items) || last.Seq >= target {
				return nil, clk.commit(f, group, items[:n], upto)
			}
			if last.Pending == 0 {
				// None pending is the consumer's server's word, and JetStream
				// places it on any replica: one behind the leader that told
				// target has not stored the rest yet. Only the leader tells
				// whether the events up to target are still stored; ending
				// here moved the cursor past them unapplied.
				t0 := time.Now()
				now, err := f.lastSeqOf(ctx, subjects)
				clk.readSince(t0)
				if err != nil {
					return nil, err
				}
				if target = min(target, now); last.Seq >= target {
					return nil, clk.commit(f, group, items[:n], upto)
				}
				if !behind {
					behind = true
					f.logger.Info("catch-up consumer has none pending before the leader's last event (its replica is behind), reading on",
						"behind", names(group), "at", last.Seq, "to", target)
				}
			}
		}
		last := items[len(items)-1].e
		if err := clk.commit(f, group, items, last.Seq); err != nil {
			return nil, err
		}
		at = last.Seq
		f.setLag(group, last.Pending)
		if upto == 0 && (last.Seq >= target || last.Pending == 0) {
			f.markReady()
		}
		if upto == 0 {
			f.setIdle(last.Pending == 0)
		}
	}
}

// setLag sets the lag of group's projections in f's stream. REQUIRES:
// called by group's committer.
func (f *Follower) setLag(group []*member, pending uint64) {
	for _, m := range group {
		if m.lag == nil {
			m.lag = f.l.metrics.lag.WithLabelValues(m.p.Name, f.stream)
		}
		m.lag.Set(float64(pending))
	}
}

func allSame(group []*member) bool {
	for _, m := range group[1:] {
		if m.subject != group[0].subject {
			return false
		}
	}
	return true
}

// pump sends the events of subject after sequence after to ch until ctx
// ends. The ordered consumer resets itself on gaps and reconnects; if its
// iterator ends anyway, pump starts a new one after the last delivered event.
func (f *Follower) pump(ctx context.Context, subjects []string, after Seq, ch chan<- followed) {
	var warned string
	placed := 0 // consumers placed again (placement.go)
follow:
	for ctx.Err() == nil {
		for e, err := range f.l.followSubjects(ctx, f.stream, subjects, after, followOpts{place: placed < placeAgainTries}) {
			var ce *CorruptError
			if err != nil && !errors.As(err, &ce) {
				if ctx.Err() != nil {
					return
				}
				var pe *placedBehindError
				if errors.As(err, &pe) {
					placed++
					f.l.metrics.consumersPlacedAgain.Inc()
					f.logger.Info("a views consumer was placed on a replica far behind its stream's leader, or on a server stopping; placing it again",
						"stream", pe.stream, "server", pe.server, "attempt", placed)
					continue follow
				}
				if msg := err.Error(); msg != warned {
					f.logger.Warn("follow", "err", err)
					warned = msg
				}
				break
			}
			warned = ""
			select {
			case ch <- followed{e, err}:
				after = e.Seq
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// commit applies items to every projection of group whose Filter matches
// them and sets their cursors to cursor, in one synced batch.
func (f *Follower) commit(group []*member, items []followed, cursor Seq) error {
	if f.parent != nil {
		f.parent.applyMu.Lock()
		defer f.parent.applyMu.Unlock()
	}
	db, release, err := f.l.useDB()
	if err != nil {
		return err
	}
	defer release()
	b := db.NewIndexedBatch()
	defer b.Close()
	for _, m := range group {
		m.batch = Batch{b: b, prefix: m.keys.data}
		m.applied = 0
	}
	for _, it := range items {
		e := it.e
		if it.err != nil {
			var hit []*member
			for _, m := range group {
				if m.matches(e.Subject) {
					f.l.metrics.corrupt.WithLabelValues(m.p.Name).Inc()
					hit = append(hit, m)
				}
			}
			if len(hit) > 0 {
				f.logger.Error("skipping corrupt event into the quarantine", "seq", e.Seq, "subject", e.Subject, "views", names(hit), "err", it.err)
				q := Quarantined{Stream: f.stream, Seq: e.Seq, Subject: e.Subject, Error: it.err.Error(), Time: time.Now().UTC()}
				for _, m := range hit {
					q.Views = append(q.Views, m.p.Name)
				}
				if err := quarantine(b, q); err != nil {
					return err
				}
			}
			continue
		}
		snap, serr := snapshotOf(e)
		tomb := e.Type == TypeDeleted && e.Stream == ""
		for _, m := range group {
			if !m.matches(e.Subject) {
				continue
			}
			if tomb && m.p.AgentRows != nil {
				// An agent's tombstone: its rows go, and Apply never sees
				// it, so no view keeps anything of the deleted agent.
				if err := f.applyTombstone(m, e.Agent); err != nil {
					return fmt.Errorf("projection %q: apply tombstone at seq %d: %w", m.p.Name, e.Seq, err)
				}
				continue
			}
			if err := f.applySnapshotTo(b, m, e, snap, serr); err != nil {
				return err
			}
			if err := m.p.Apply(&m.batch, e); err != nil {
				if len(f.members) > 1 {
					return fmt.Errorf("projection %q: apply %s at seq %d: %w", m.p.Name, e.Type, e.Seq, err)
				}
				return fmt.Errorf("apply %s at seq %d: %w", e.Type, e.Seq, err)
			}
			m.applied++
		}
	}
	c := encodeUint(uint64(cursor))
	for _, m := range group {
		if err := b.Set(m.keys.cursor, c, nil); err != nil {
			return err
		}
	}
	f.written = max(f.written, cursor) // before the commit: a bound (openInfo)
	if err := f.l.commitView(b); err != nil {
		return fmt.Errorf("commit %s at seq %d: %w", f.what(), cursor, err)
	}
	for _, m := range group {
		m.batch.runAfter() // before the cursor moves: a WaitFor returns after them
	}
	for _, m := range group {
		m.cursor = cursor
		g := f.metricsOf(m)
		g.cursor.Set(float64(cursor))
		if m.applied > 0 {
			g.applied.Add(float64(m.applied))
		}
	}
	f.publish()
	return nil
}

// applySnapshotTo applies e to m when it is a snapshot part (snap, or a
// part that cannot be decoded, serr), and quarantines a part m cannot use.
func (f *Follower) applySnapshotTo(b *pebble.Batch, m *member, e Event, snap *Snapshot, serr error) error {
	if snap == nil && serr == nil {
		return nil
	}
	why := ""
	if serr != nil {
		why = serr.Error()
	} else {
		var err error
		if why, err = f.applySnapshot(&m.batch, m, e, snap); err != nil {
			return fmt.Errorf("projection %q: apply snapshot at seq %d: %w", m.p.Name, e.Seq, err)
		}
	}
	if why == "" || m.p.AgentRows == nil {
		return nil
	}
	f.l.metrics.corrupt.WithLabelValues(m.p.Name).Inc()
	f.logger.Error("a snapshot part cannot be applied to this view; quarantined: the view misses the agent's compacted history",
		"seq", e.Seq, "subject", e.Subject, "view", m.p.Name, "err", why)
	return quarantine(b, Quarantined{Stream: f.stream, Seq: e.Seq, Subject: e.Subject, Views: []string{m.p.Name},
		Error: why, Time: time.Now().UTC()})
}

// matches reports whether m's Filter selects an event stored on subject.
func (m *member) matches(subject string) bool {
	if m.all {
		return true
	}
	return subjectMatch(m.subject, subject)
}

// subjectMatch reports whether subject matches pattern, whose tokens are
// literal or "*".
func subjectMatch(pattern, subject string) bool {
	for {
		p, prest, pmore := strings.Cut(pattern, ".")
		s, srest, smore := strings.Cut(subject, ".")
		if p != "*" && p != s {
			return false
		}
		if !pmore || !smore {
			return pmore == smore
		}
		pattern, subject = prest, srest
	}
}

// publish makes the lowest cursor visible to WaitFor and Cursor.
// REQUIRES: called from Run's goroutine (it reads the members' cursors).
func (f *Follower) publish() {
	if len(f.members) == 0 {
		return // an owned-views shard follower with no partition
	}
	cur := f.members[0].cursor
	for _, m := range f.members[1:] {
		cur = min(cur, m.cursor)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur == f.mu.cursor {
		return
	}
	f.mu.cursor = cur
	f.bumpLocked()
	if f.parent != nil {
		f.parent.bump()
	}
}

func (f *Follower) markReady() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.mu.isReady {
		f.mu.isReady = true
		close(f.ready)
		f.logger.Info("projection ready", "cursor", f.mu.cursor)
	}
	if f.parent != nil {
		f.parent.shardReady() // locks: a shard follower's, then its parent's
	}
}
