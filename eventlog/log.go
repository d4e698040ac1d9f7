package eventlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults for Config fields left zero.
const (
	DefaultPrefix       = "forever"
	DefaultEventsStream = "FOREVER_EVENTS"
	DefaultChunksStream = "FOREVER_CHUNKS"
	DefaultChunkMaxAge  = 24 * time.Hour
	// DefaultChunkSafetyFactor is ChunkSafetyAge's default, in ChunkMaxAges.
	DefaultChunkSafetyFactor = 10
	DefaultDuplicates        = 2 * time.Minute
	// DefaultFencedChunkDuplicates is the chunks stream's dedup window for
	// a fenced Log (see Config.ChunkDuplicates).
	DefaultFencedChunkDuplicates = time.Second
	// DefaultAckTimeout bounds each wait for an acknowledgement that has no
	// deadline of its own.
	DefaultAckTimeout = 5 * time.Second
	// DefaultMaxBatch is the largest atomic batch AppendBatch sends; the
	// server's default limit is 1,000 messages per batch.
	DefaultMaxBatch = 1000
)

// Config configures Open. A zero field means "use the default".
type Config struct {
	// Conn is the NATS connection. Required. The Log does not close it.
	Conn *nats.Conn
	// Prefix is the first subject token: events go to <Prefix>.evt.<agent>,
	// chunks to <Prefix>.chunk.<agent>.<stream>. Default "forever".
	Prefix string
	// EventsStream and ChunksStream name the JetStream streams; with
	// Shards, the base of each shard's stream name (<name>_<k>).
	EventsStream, ChunksStream string
	// Shards, when above 0, shards the log (shards.go): the partition is
	// in every subject, and partition p's events and chunks are in the
	// streams of shard p mod Shards. 0 is the unsharded layout: one events
	// and one chunks stream, subjects without the partition. It is fixed
	// for the streams' life, as Partitions is. At most MaxShards.
	Shards int
	// Partitions is the partition count agents are placed by, the
	// ownership's (FNV-1a of the id modulo Partitions). Required with
	// Shards, and a multiple of it.
	Partitions int
	// OwnedViews, with Shards, makes the log's Followers (and Projectors)
	// apply only the partitions given to FollowPartition, each partition
	// from a cursor of its own (ownedviews.go): a node's views then cost
	// its own partitions' events. Without it every Follower applies every
	// partition. A view kept one way and then opened the other is rebuilt.
	OwnedViews bool
	// ChunkMaxAge is how long an ended chat stream's chunks are kept: a
	// retention sweep (chat/chunk.Sweeper) purges them with PurgeChunks once
	// the stream ended longer ago than this. The Log itself removes nothing
	// at this age, so a turn still streaming never loses chunks to it.
	// Default 24h.
	ChunkMaxAge time.Duration
	// ChunkSafetyAge is the chunks stream's JetStream MaxAge: a last-resort
	// cap that removes any chunk older than it, of a stream still streaming
	// too (a turn stuck that long), and bounds the stream if no sweep runs.
	// Default DefaultChunkSafetyFactor times ChunkMaxAge.
	ChunkSafetyAge time.Duration
	// Duplicates is the dedup window for message ids. Default 2m.
	Duplicates time.Duration
	// ChunkDuplicates is the dedup window of the chunks stream. Default
	// Duplicates for a Log without Owner, and DefaultFencedChunkDuplicates
	// for a fenced one: its chunks are fenced by the expected sequence of
	// their chat stream, never published again under the same id, so the
	// window only costs: JetStream reloads the ids of every message stored
	// within it when it restores the stream, which made a restart under
	// chat load grow with the recent chunk rate (go run ./bench -run
	// '^restart-load$').
	ChunkDuplicates time.Duration
	// Replicas of both streams. Default 1.
	Replicas int
	// MaxConsumers caps the consumers of each stream: every Follow (a
	// client's replay, a view's follower) holds one while it runs. 0
	// leaves the server's default (1,000 per stream since nats-server
	// 2.15).
	MaxConsumers int
	// MaxBatch caps the number of events in one atomic batch. Default 1000.
	MaxBatch int
	// AckTimeout bounds every wait for the server that has no deadline of
	// its own: an async publish's acknowledgement (then the event is
	// published again with the same message id, so JetStream's dedup keeps
	// it once), an atomic batch commit, a fence read. Waits made under a
	// caller's ctx with a deadline end at that deadline instead. Default 5s.
	AckTimeout time.Duration
	// AsyncBatches makes AppendBatch publish asynchronously and wait for every
	// acknowledgement instead of using atomic batches. Use it when the server
	// does not fsync each write (sync interval): there nats-server stages an
	// atomic batch in a synced temporary store, which makes it several times
	// slower than plain publishes. Batches are then ordered but not atomic: a
	// failure part way can leave a prefix stored (retrying is safe, ids dedup).
	// A fenced Log (Owner set) ignores it: only an atomic batch can carry
	// one expected sequence for all its events, so a stale owner's pipelined
	// events after the first would land.
	AsyncBatches bool
	// Bind uses the existing streams as they are instead of creating or
	// updating them: for clients, which must not change the server's stream
	// config (retention, limits). Open fails if a stream is missing.
	Bind bool
	// ChunksOnly, with Bind, binds the chunks stream only: for a client
	// that follows chat streams with a tenant's credential, which may not
	// read the events stream. Reading events then fails.
	ChunksOnly bool
	// APIPrefix, when set, is the JetStream API prefix the Log uses instead
	// of $JS.API (jetstream.NewWithAPIPrefix): a tenant's client of agentd
	// with auth reaches the API through agentd, which counts its calls
	// against the tenant's rate (auth.ClientAPIPrefix).
	APIPrefix string
	// Owner, when set, fences every append to an agent's subjects: the
	// append is refused with ErrNotOwner unless Owner grants a token for
	// the agent; it carries the token in the Forever-Node and Forever-Epoch
	// headers; and it expects the last sequence this process left on the
	// subject (the agent's events, or one chat stream's chunks), so an
	// append after another writer took the agent over fails with ErrFenced
	// instead of interleaving with it. Nil means a single writer: no
	// fencing.
	Owner Owner
	// Leaving, when set, names the servers whose node is stopping: a
	// views consumer JetStream placed on one is placed again, as one on
	// a replica far behind is (placement.go). Such a server still hosts
	// consumers through its lame duck second, and a catch-up placed
	// there delivered nothing until it shut down.
	Leaving func(server string) bool
	// OnFenced is told, in its own goroutine, when an append of agent
	// conflicted under a token: another writer took the agent over. The
	// agent's later appends under the same token fail with ErrFenced.
	OnFenced func(agent string, err error)
	// Dir is where Pebble keeps the projections. Empty means no projections:
	// NewProjector and View then return ErrInvalid.
	Dir string
	// FS is the filesystem Pebble keeps Dir on: tests pass vfs.NewMem,
	// vfs.NewCrashableMem or an errorfs to inject faults. Default vfs.Default.
	FS vfs.FS
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the package's metrics. Nil means not registered.
	Registerer prometheus.Registerer
}

// Validate checks the config after defaults are applied.
func (c *Config) Validate() error {
	if c.Conn == nil {
		return errors.New("eventlog: config: Conn is required")
	}
	if !ValidToken(c.Prefix) {
		return fmt.Errorf("eventlog: config: prefix %q is not a valid subject token", c.Prefix)
	}
	if c.Shards < 0 || c.Shards > MaxShards {
		return fmt.Errorf("eventlog: config: shards %d: want 0 (unsharded) to %d", c.Shards, MaxShards)
	}
	if c.Shards > 0 && (c.Partitions < 1 || c.Partitions%c.Shards != 0) {
		return fmt.Errorf("eventlog: config: partitions %d must be a positive multiple of shards %d", c.Partitions, c.Shards)
	}
	if c.OwnedViews && c.Shards == 0 {
		return errors.New("eventlog: config: owned views need a sharded log (shards above 0)")
	}
	if c.EventsStream == c.ChunksStream {
		return fmt.Errorf("eventlog: config: events and chunks streams must differ (both %q)", c.EventsStream)
	}
	if c.ChunkMaxAge < 0 || c.ChunkSafetyAge < 0 || c.Duplicates < 0 || c.ChunkDuplicates < 0 || c.Replicas < 0 || c.MaxConsumers < 0 || c.MaxBatch < 0 || c.AckTimeout < 0 {
		return errors.New("eventlog: config: durations and counts must not be negative")
	}
	return nil
}

func (c *Config) ensureDefaults() {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.EventsStream == "" {
		c.EventsStream = DefaultEventsStream
	}
	if c.ChunksStream == "" {
		c.ChunksStream = DefaultChunksStream
	}
	if c.ChunkMaxAge == 0 {
		c.ChunkMaxAge = DefaultChunkMaxAge
	}
	if c.ChunkSafetyAge == 0 {
		c.ChunkSafetyAge = DefaultChunkSafetyFactor * c.ChunkMaxAge
	}
	if c.Duplicates == 0 {
		c.Duplicates = DefaultDuplicates
	}
	if c.ChunkDuplicates == 0 {
		c.ChunkDuplicates = c.Duplicates
		if c.Owner != nil {
			c.ChunkDuplicates = DefaultFencedChunkDuplicates
		}
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	if c.MaxBatch == 0 || c.MaxBatch > DefaultMaxBatch {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Log is the event log: two JetStream streams and the Pebble database that
// holds the projections. It is safe for concurrent use.
type Log struct {
	cfg Config
	nc  *nats.Conn
	js  jetstream.JetStream
	// handles are the log's streams by name, each with its group commit
	// and send costs: the events and the chunks stream, or each shard's
	// (shards.go). Set by Open, then read-only; a stream of the map may
	// be missing for a ChunksOnly log (its events streams).
	handles map[string]*handle
	db      *pebble.DB // nil without Dir
	logger  *slog.Logger
	metrics *metrics
	fences  fences
	// elections ends the waits for answers a stream's leader change lost
	// (elections.go), followed through electionsSub: replicated logs.
	elections    elections
	electionsSub *nats.Subscription
	// headroom spares CheckFollow its reads while a stream has room
	// (followcheck.go).
	headroom headroom
	// syncWAL is whether projection commits are synced (in the background,
	// see viewSyncDelay). Only the crash-consistency test turns it off, to
	// prove it would notice.
	syncWAL bool
	vsync   viewSync
	// stopCompact, set only by tests, is called at Compact's crash points
	// ("appended": the snapshot stored, the history not purged); an error
	// stops Compact there.
	stopCompact func(point string) error
	// skewExpect, set only by tests, makes a send of a message (subject,
	// message id) for which it returns true expect a last sequence the
	// subject does not have, so JetStream refuses it as a stream leader
	// behind its log does.
	skewExpect func(subject, id string) bool
	// skipPurge, set only by tests, makes Compact's next purge remove
	// nothing, as a purge a crash undid: what deleteLeftBefore cleans up.
	skipPurge bool
	// beforeRead, set only by tests, is called by a read once it has the
	// last sequence it reads up to, before reading: where events removed
	// meanwhile (aged out, purged) leave the read short of that sequence.
	beforeRead func()
	// refuseLeaderGet, set only by tests, makes a leader read answered
	// as JetStream answers while the stream elects a leader (10008)
	// while it returns true.
	refuseLeaderGet func() bool
	// followDelivered, set only by tests, is called by a follow with each
	// event its consumer delivers, before the follow yields it: a test
	// makes the consumer one of a replica behind the stream's leader
	// (events held back, none pending).
	followDelivered func(ctx context.Context, e *Event)
	// placedBehindHook, set only by tests, answers a placement check
	// (placement.go) in place of the stream's leader, on any log.
	placedBehindHook func(stream string) bool
	// placements holds, by stream, where the last views consumer
	// checked was placed (placement.go), for the log line of a consumer
	// that delivered nothing.
	placements sync.Map
	// directNone, set only by tests, makes a read's direct gets find
	// nothing while it returns true, as a replica that stores none of
	// what is read: the read goes on through its consumer.
	directNone func() bool

	// dbUsers counts the Pebble reads and commits in progress; Close waits
	// for them. Add only under mu with closed false (useDB).
	dbUsers sync.WaitGroup

	// heal is held by the one goroutine reopening Pebble after a failed
	// write (awaitDB), and by Close.
	heal sync.Mutex

	// held, when set, refuses every event append of a fenced Log with
	// ErrRemoved (HoldEvents).
	held atomic.Pointer[error]

	// owned are the partitions the Followers of an OwnedViews log apply.
	owned ownedParts

	// fullAt is when JetStream last refused an append for want of space
	// (ErrStorageFull), in Unix nanoseconds; 0 never.
	fullAt atomic.Int64

	mu struct {
		sync.Mutex
		closed bool
		// projections are the registered projections by name, with the
		// Follower that keeps each (Compact reads them).
		projections map[string]registered
		// broken is set (wrapping ErrViewsStalled) when a Pebble write
		// failed; cleared when Pebble was reopened.
		broken error
		// breaks is closed when broken is set, and replaced when cleared.
		breaks chan struct{}
		// swapping is non-nil while Pebble is being reopened: useDB waits
		// until it is closed.
		swapping chan struct{}
		// resets are the RestartViews signals, by stream.
		resets map[string]*viewReset
	}
}

// viewReset is how RestartViews tells the Followers of one stream.
type viewReset struct {
	ch      chan struct{} // closed and replaced at each RestartViews
	rebuild uint64        // counts the RestartViews that asked for a rebuild
}

// RestartViews makes every Follower (and Projector) of stream start over:
// it opens the stream again, checks that its views were built from it (a
// stream deleted and created again has another creation time, and its
// views are rebuilt from it) and follows from the stored cursors. With
// rebuild, every view of the stream is dropped and replayed from the
// stream as it is now, whatever its creation time: after a purge that
// removed the events the views hold. It returns at once, with the count of
// rebuilds asked for stream so far: a Follower's Rebuilds reaches it once
// the Follower dropped its views (then WaitFor waits for the replay).
func (l *Log) RestartViews(stream string, rebuild bool) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.resetLocked(stream)
	if rebuild {
		r.rebuild++
	}
	close(r.ch)
	r.ch = make(chan struct{})
	return r.rebuild
}

// resetOf returns the signal a Follower of stream waits on, and how many
// rebuilds were asked so far.
func (l *Log) resetOf(stream string) (<-chan struct{}, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.resetLocked(stream)
	return r.ch, r.rebuild
}

// resetLocked returns stream's viewReset. REQUIRES: l.mu held. Of a
// sharded log, every shard's stream of one kind has its base's: the
// Follower of the kind follows them all.
func (l *Log) resetLocked(stream string) *viewReset {
	if h := l.handleOf(stream); h != nil && l.sharded() {
		stream = l.cfg.EventsStream
		if h.chunks {
			stream = l.cfg.ChunksStream
		}
	}
	if l.mu.resets == nil {
		l.mu.resets = map[string]*viewReset{}
	}
	r := l.mu.resets[stream]
	if r == nil {
		r = &viewReset{ch: make(chan struct{})}
		l.mu.resets[stream] = r
	}
	return r
}

// Open creates or updates the streams (idempotently) and opens Pebble under
// cfg.Dir. The caller must Close the Log after every Projector's Run returned.
func Open(ctx context.Context, cfg Config) (*Log, error) {
	cfg.ensureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var js jetstream.JetStream
	var err error
	if cfg.APIPrefix != "" {
		js, err = jetstream.NewWithAPIPrefix(cfg.Conn, cfg.APIPrefix, jetstream.WithPublishAsyncTimeout(cfg.AckTimeout))
	} else {
		js, err = jetstream.New(cfg.Conn, jetstream.WithPublishAsyncTimeout(cfg.AckTimeout))
	}
	if err != nil {
		return nil, fmt.Errorf("eventlog: jetstream: %w", err)
	}
	l := &Log{cfg: cfg, nc: cfg.Conn, js: js, logger: cfg.Logger.With("subsystem", "eventlog"), syncWAL: true}
	l.metrics, err = newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	if cfg.Bind {
		if err := l.bindStreams(ctx); err != nil {
			return nil, err
		}
	} else if err := l.createStreams(ctx); err != nil {
		return nil, err
	}
	if cfg.Dir != "" {
		if l.db, err = l.openDB(); err != nil {
			return nil, err
		}
		if names, err := l.dropOtherLayout(l.db); err != nil {
			l.db.Close()
			return nil, err
		} else if len(names) > 0 {
			l.logger.Warn("views built from the other stream layout (a move into shards): rebuilding them from the log", "views", names, "shards", cfg.Shards)
		}
	}
	if cfg.Replicas > 1 {
		if l.electionsSub, err = l.elections.watch(cfg.Conn); err != nil {
			l.logger.Warn("leader elections not followed: writes whose answer a stream's leader change lost wait the ack timeout", "err", err)
		}
	}
	l.mu.projections = map[string]registered{}
	l.mu.breaks = make(chan struct{})
	return l, nil
}

// streamConfigs are the configs of the events and the chunks stream; of
// a sharded log, the base its shards' configs are made from (shardConfig).
func (l *Log) streamConfigs() (events, chunks jetstream.StreamConfig) {
	cfg := l.cfg
	events = jetstream.StreamConfig{
		Name:               cfg.EventsStream,
		Description:        "Forever agent lifecycle events",
		Subjects:           []string{cfg.Prefix + ".evt.>"},
		Storage:            jetstream.FileStorage,
		Replicas:           cfg.Replicas,
		Duplicates:         cfg.Duplicates,
		AllowAtomicPublish: true,
		AllowDirect:        true,
		MaxConsumers:       cfg.MaxConsumers,
	}
	chunks = jetstream.StreamConfig{
		Name:               cfg.ChunksStream,
		Description:        "Forever chat stream chunks",
		Subjects:           []string{cfg.Prefix + ".chunk.>"},
		Storage:            jetstream.FileStorage,
		Replicas:           cfg.Replicas,
		Duplicates:         min(cfg.ChunkDuplicates, cfg.ChunkSafetyAge),
		MaxAge:             cfg.ChunkSafetyAge,
		AllowAtomicPublish: true,
		AllowDirect:        true,
		MaxConsumers:       cfg.MaxConsumers,
	}
	return events, chunks
}

// configOf returns the config of the log's stream called name; ok is
// false for a name that is not one of the log's streams.
func (l *Log) configOf(name string) (cfg jetstream.StreamConfig, ok bool) {
	events, chunks := l.streamConfigs()
	for _, chunk := range []bool{false, true} {
		base := events
		if chunk {
			base = chunks
		}
		for k, n := range l.streamNames(chunk) {
			if n != name {
				continue
			}
			if !l.sharded() {
				return base, true
			}
			base.Name = n
			base.Subjects = l.shardSubjects(k, chunk)
			base.Description += fmt.Sprintf(", shard %d of %d", k, l.cfg.Shards)
			base.Metadata = map[string]string{
				metaShards:     strconv.Itoa(l.cfg.Shards),
				metaPartitions: strconv.Itoa(l.cfg.Partitions),
			}
			return base, true
		}
	}
	return jetstream.StreamConfig{}, false
}

// newHandles fills l.handles with every stream of the log, without their
// jetstream.Stream.
func (l *Log) newHandles() {
	l.handles = map[string]*handle{}
	for _, chunk := range []bool{false, true} {
		for k, n := range l.streamNames(chunk) {
			h := &handle{name: n, shard: k, chunks: chunk}
			h.cost.replicated = l.cfg.Replicas > 1
			l.handles[n] = h
		}
	}
}

// createStreams creates or updates every stream to match the config
// (ensureStream: one that matches is only looked up).
func (l *Log) createStreams(ctx context.Context) error {
	l.newHandles()
	for _, chunk := range []bool{false, true} {
		for _, n := range l.streamNames(chunk) {
			cfg, _ := l.configOf(n)
			st, err := ensureStream(ctx, l.js, cfg)
			if err != nil {
				return fmt.Errorf("eventlog: create stream %s: %w", n, err)
			}
			l.handles[n].st = st
		}
	}
	return nil
}

// EnsureStream creates the stream called name (the events or the chunks
// stream) again when it is missing, with the config Open gives it: after
// it was deleted under the running process. A stream that exists is left
// as it is. The Log's appends, reads and follows use the new stream at
// once; its views follow it once RestartViews is called. Errors:
// ErrInvalid for another name, ErrClosed, or JetStream's.
func (l *Log) EnsureStream(ctx context.Context, name string) error {
	if l.closed() {
		return ErrClosed
	}
	if l.cfg.Bind {
		return invalidf("ensure stream %s: the log is bound to existing streams", name)
	}
	cfg, ok := l.configOf(name)
	if !ok {
		return invalidf("ensure stream %s: not a stream of the log", name)
	}
	_, err := l.js.Stream(ctx, name)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("eventlog: stream %s: %w", name, err)
	}
	if _, err := l.js.CreateStream(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("eventlog: create stream %s again: %w", name, err)
	}
	l.logger.Warn("stream created again", "stream", name)
	return nil
}

// Close closes Pebble, once the reads and projection commits in progress
// are done. It does not close the NATS connection. Calls made after Close,
// reads of Views included, return ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return nil
	}
	l.mu.closed = true
	l.mu.Unlock()
	if l.electionsSub != nil {
		_ = l.electionsSub.Unsubscribe() // the connection may be closed already
	}
	l.stopViewSync()
	l.dbUsers.Wait()
	l.heal.Lock() // a reopen in progress ends first
	defer l.heal.Unlock()
	if l.db != nil {
		// What the views applied is durable before Pebble closes.
		if l.syncWAL && l.Stalled() == nil {
			if err := l.syncDB(l.db); err != nil {
				l.logger.Warn("views not synced at close; they catch up from the log at the next start", "err", err)
			}
		}
		if err := closeBroken(l.db); err != nil {
			return fmt.Errorf("eventlog: close pebble: %w", err)
		}
	}
	return nil
}

func (l *Log) closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.closed
}

// useDB reserves Pebble for one read or commit: Close (and a reopen after a
// failed write) waits until release is called. After Close it returns
// ErrClosed, so nothing reaches a closed Pebble (which panics); while a
// reopen is under way it waits for it, and when the reopen failed it returns
// the failure (wrapping ErrViewsStalled).
func (l *Log) useDB() (db *pebble.DB, release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.mu.swapping != nil && !l.mu.closed {
		ch := l.mu.swapping
		l.mu.Unlock()
		<-ch
		l.mu.Lock()
	}
	if l.mu.closed {
		return nil, nil, ErrClosed
	}
	if l.db == nil {
		return nil, nil, l.mu.broken
	}
	l.dbUsers.Add(1)
	return l.db, l.dbUsers.Done, nil
}

// EventsStream returns the name of the JetStream stream of the agents'
// lifecycle events; of a sharded log, the base of its shards' names
// (EventsStreams lists them).
func (l *Log) EventsStream() string { return l.cfg.EventsStream }

// Replicas returns the replicas of the log's streams.
func (l *Log) Replicas() int { return l.cfg.Replicas }

// JetStream returns the log's JetStream context, for a stream of the
// daemon's own beside the log's two (the agent events).
func (l *Log) JetStream() jetstream.JetStream { return l.js }

// ChunksStream returns the name of the JetStream stream of chat chunks.
func (l *Log) ChunksStream() string { return l.cfg.ChunksStream }

// HoldEvents refuses every append to the agents' events (chunks are not
// held) with an error wrapping ErrRemoved and cause, until ReleaseEvents:
// while the events stream lost the agents' history and what ran on it is
// being stopped, nothing of that work may land in the stream that
// replaces it. It applies to a Log with an Owner (agentd's).
func (l *Log) HoldEvents(cause error) { l.held.Store(&cause) }

// ReleaseEvents ends HoldEvents.
func (l *Log) ReleaseEvents() { l.held.Store(nil) }

// StorageFullAt returns when JetStream last refused an append of this Log
// because it had no room (ErrStorageFull); zero if it never did.
func (l *Log) StorageFullAt() time.Time {
	ns := l.fullAt.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Prefix returns the subject prefix.
func (l *Log) Prefix() string { return l.cfg.Prefix }

// ChunkMaxAge returns Config.ChunkMaxAge: how long an ended chat stream's
// chunks are kept before a retention sweep purges them.
func (l *Log) ChunkMaxAge() time.Duration { return l.cfg.ChunkMaxAge }

// MaxPayload returns the largest message the server accepts, in bytes.
func (l *Log) MaxPayload() int64 { return l.nc.MaxPayload() }

// EventsSubject returns the subject of an agent's events:
// <prefix>.evt.<agent>, or <prefix>.evt.<partition>.<agent> sharded.
func (l *Log) EventsSubject(agent string) string {
	return l.cfg.Prefix + ".evt." + l.partToken(agent) + agent
}

// ChunksSubject returns the subject of the chunks of one chat stream:
// <prefix>.chunk.<agent>.<stream>, or with the partition before the agent
// sharded.
func (l *Log) ChunksSubject(agent, stream string) string {
	return l.cfg.Prefix + ".chunk." + l.partToken(agent) + agent + "." + stream
}

// subject returns where e is stored and which JetStream stream holds it.
func (l *Log) subject(e *Event) (subject, stream string) {
	if e.Stream != "" {
		return l.ChunksSubject(e.Agent, e.Stream), l.streamFor(e.Agent, true)
	}
	return l.EventsSubject(e.Agent), l.streamFor(e.Agent, false)
}

// pebbleLogger routes Pebble's log lines to slog.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf panics with a pebbleFatal: Pebble calls it when it cannot go on
// (a failed WAL write among others) and must not return. A commit made by
// this package recovers it (see commitView); elsewhere it ends the process.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
	f := pebbleFatal{msg: fmt.Sprintf(format, args...)}
	for _, a := range args {
		if err, ok := a.(error); ok {
			f.err = err
			break
		}
	}
	panic(f)
}

// asyncBatches reports whether batches are pipelined instead of atomic:
// Config.AsyncBatches, on a Log that does not fence.
func (l *Log) asyncBatches() bool { return l.cfg.AsyncBatches && l.cfg.Owner == nil }
