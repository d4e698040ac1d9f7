package ownership

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

	"github.com/forever-agents/forever/internal/backoff"

	"github.com/nats-io/nats.go/jetstream"
)

// Manager holds this node's leases. Create it with New, then Run it.
type Manager struct {
	cfg     Config
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	parts   jetstream.KeyValue // the partition count and epoch counters
	log     *slog.Logger
	met     *metrics
	ready   chan struct{}
	poke    chan struct{}
	rewatch chan struct{} // RestoreBucket asks Run for a new watch
	// announcing asks the renewer to write this node's key now (warm.go).
	announcing chan struct{}
	// beatMu orders the node key's writes: a value built later lands
	// later.
	beatMu   sync.Mutex
	warmers  sync.WaitGroup // Prepare goroutines (warm.go)
	serving  sync.WaitGroup // Serve goroutines
	handoffs sync.WaitGroup
	renewed  time.Time // when the last renewal round began (Run's goroutine only)
	// epochBase is where the epoch counters start (see epoch.go).
	epochBase uint64
	// afterEpochRead, set only by tests, runs between an acquisition's
	// read of the epoch counter and its lease write.
	afterEpochRead func(p int)
	// beforeRenew, set only by tests before Run, runs at the start of
	// every renewal attempt.
	beforeRenew func()
	// noDrains, set only by tests before Run, leaves Drains out of the
	// node key, as an earlier release's.
	noDrains bool

	mu struct {
		sync.Mutex
		// started is when Run began: the start this node's key announces,
		// and its Since in NodeInfos, which a reader may ask before Run.
		started time.Time
		held    map[int]*held
		leases  map[int]cached       // every lease key, as watched
		nodes   map[string]time.Time // live nodes, with when first seen
		// beats is when each node's key was last seen written (its
		// heartbeat), on this process's monotonic clock.
		beats map[string]time.Time
		// beatRevs is the revision of each node's key last seen: a
		// restarted watcher delivers every key again, and an unchanged
		// revision is no new heartbeat.
		beatRevs map[string]uint64
		// starts is the start each node's key announces, and lives how
		// long the last ended incarnation of each was seen alive
		// (incarnation.go): what dueLocked reads.
		starts map[string]string
		lives  map[string]life
		// reads is the record format each node announces it reads;
		// behind, once set, the active format this node found past its
		// own (format.go).
		reads  map[string]int
		behind int
		// active is the cluster's active format as last read (New, then
		// each heartbeat): what ActiveFormat answers without I/O.
		active int
		// ownSeen is the newest revision of this node's own key the
		// watcher delivered; beatAcked the newest the server acknowledged,
		// at beatAckedAt. A watcher that lags an acknowledged heartbeat is
		// broken (its consumer was on a node that died) and is restarted.
		ownSeen, beatAcked uint64
		beatAckedAt        time.Time
		// lastAny is when the watcher last delivered any write (this
		// node's own heartbeats come every RenewEvery): while it is
		// silent, nothing can be judged stale.
		lastAny time.Time
		// resumedAt is when the watcher delivered again after such a
		// silence (the lease bucket elected a leader, a watch was made
		// again): no holder could renew, nor be seen renewing, during
		// it, so nothing is judged stale until a live holder has had
		// resumeGrace to renew again.
		resumedAt time.Time
		// beatFailing: this node's last heartbeat failed (the renewer
		// retries it every retryEvery).
		beatFailing bool
		// dogAt is when the watchdog last ran; pauseEnded, when it last
		// ran after a gap longer than graceFresh: the process was stopped
		// (SIGSTOP, a long pause) or starved until then.
		dogAt, pauseEnded time.Time
		// watchGen is the generation of the running watch (watcher.start).
		watchGen int
		free     map[int]time.Time // partitions without a lease, since
		// lastHolder is the node whose lease of a free partition went
		// away (expired, or deleted), while the partition stays free.
		lastHolder map[int]string
		// maxEpoch is the highest epoch seen of each partition's leases,
		// also of leases since gone.
		maxEpoch map[int]uint64
		// garbled holds the lease keys whose value does not parse (a
		// write that was no lease's, issue 32), with their revision and
		// when seen: no lease, but no free partition either, until the
		// key is deleted (plan) a TTL after it was written.
		garbled map[int]cached
		// gaveUp holds the epoch of each lease this process handed off
		// or lost while the watch may still show it (wantLocked): no
		// lease of this node's name from before a restart, which it
		// takes back.
		gaveUp map[int]uint64
		// moves are the last lease moves seen, oldest first (Moves).
		moves    []Move
		stopping bool
		// quietUntil: no lease is acquired or taken over before it, after
		// the bucket was lost (RestoreBucket): every holder of the lost
		// bucket's leases has stopped serving by then.
		quietUntil time.Time
		// starvedSince is when this node last went from holding a
		// partition (or being given none) to holding none of those the
		// assignment gives it; zero while it is not starved.
		starvedSince time.Time
		// warming is each running Prepare, by partition; peers what
		// each node's key announces of its warm partitions; waits the
		// handoffs held back for their receiver's views (warm.go).
		warming map[int]*warming
		peers   map[string]peerWarm
		waits   map[int]warmWait
		// leaving holds the nodes whose key announces they are stopping;
		// draining says this node is (drain.go).
		leaving  map[string]bool
		draining bool
	}
}

// held is a lease this node holds.
type held struct {
	lease     Lease
	rev       uint64    // the key's current revision: renewals expect it
	until     time.Time // monotonic: serve no longer than this
	ctx       context.Context
	cancel    context.CancelCauseFunc
	done      chan struct{} // closed when Serve returned
	releasing bool          // handed off: no more renewals
	// tried is when its last renewal was sent; failing says that renewal
	// failed without a conflict or got no answer in time (the bucket
	// electing a leader): Run retries it every retryEvery, and the lease
	// is served on the election grace past until while the retries go on
	// (validLocked).
	tried   time.Time
	failing bool
	graced  bool // past until on the grace: counted and logged once
}

// validLocked reports whether h may be served at now: before its deadline,
// or on the election grace after it. The grace holds only while this
// process keeps retrying the renewal on a live connection (its last one
// sent within graceFresh, connected), and ran without a pause since the
// deadline (the watchdog saw no gap): a process that was stopped
// (SIGSTOP, a long pause) sent nothing meanwhile, and one cut off from
// NATS sends nowhere; both find the lease expired, as before the grace.
// REQUIRES: m.mu held.
func (m *Manager) validLocked(h *held, now time.Time) bool {
	if !now.After(h.until) {
		return true
	}
	if !h.failing || now.After(h.until.Add(m.cfg.ElectionGrace)) || now.Sub(h.tried) > m.graceFresh() {
		return false
	}
	// Nor after a pause of the process: it did not retry meanwhile, and a
	// retry sent as it resumes proves nothing of the time it was stopped.
	if now.Sub(m.mu.dogAt) > m.graceFresh() || m.mu.pauseEnded.After(h.until) {
		return false
	}
	if !h.graced {
		h.graced = true
		m.met.graced.Inc()
		m.log.Warn("the lease bucket does not take this lease's renewal; serving it past its deadline on the election grace while renewals are retried",
			"partition", h.lease.Partition, "epoch", h.lease.Epoch, "grace", m.cfg.ElectionGrace)
	}
	return true
}

// keyTTL is the server TTL of lease and node keys: TTL plus the election
// grace, so a live holder's keys outlast a leader election of the bucket
// that its renewals wait out. A dead holder's are taken over sooner, once
// no renewal of them was seen for a TTL (staleLocked).
func (m *Manager) keyTTL() time.Duration { return m.cfg.TTL + m.cfg.ElectionGrace }

// retryEvery is how often a failed renewal or heartbeat is retried.
func (m *Manager) retryEvery() time.Duration { return max(m.cfg.RenewEvery/10, 10*time.Millisecond) }

// graceFresh is how recent a holder's last renewal attempt must be for
// the election grace to hold: several retry periods, far below the
// resumeGrace others give it before judging it stale.
func (m *Manager) graceFresh() time.Duration {
	return max(m.cfg.RenewEvery/2, 4*m.retryEvery(), 2*m.dogEvery())
}

// dogEvery is the watchdog's period.
func (m *Manager) dogEvery() time.Duration { return max(m.cfg.Margin/4, 10*time.Millisecond) }

// resumeGrace is how long after the watcher resumed from a silence no key
// is judged stale: a live holder retries its failed renewals and heartbeat
// every retryEvery, so they land within one of the bucket's return and the
// resumed watch delivers them well within it.
func (m *Manager) resumeGrace() time.Duration { return m.cfg.RenewEvery }

// staleLocked reports whether a key last seen written at seen (a lease
// renewal, a node heartbeat) has gone a whole TTL without being written
// again: its writer stopped, and the key outlives it only until the server
// expires it, which can come late (the bucket's leader was on the dead
// node). Its holder stopped serving by then: it serves at most TTL minus
// Margin after sending its last renewal, which this process saw after it
// was stored.
// REQUIRES: m.mu held.
//
// Nothing is stale while the watcher itself is silent (the bucket electing
// a leader, a slow connection): then no renewal of anyone is seen, and
// live holders would look dead.
//
// Nor is anything stale until resumeGrace after the watcher delivered again
// from such a silence: a holder that could not renew through the bucket's
// election (and served on the election grace) renews within a retry period
// of the bucket's return, and must not be taken for dead because its last
// renewal before the election is older than a TTL.
func (m *Manager) staleLocked(seen, now time.Time) bool {
	if now.Sub(m.mu.lastAny) > 2*m.cfg.RenewEvery {
		return false
	}
	if !m.mu.resumedAt.IsZero() && now.Sub(m.mu.resumedAt) <= m.resumeGrace() {
		return false
	}
	return !seen.IsZero() && now.Sub(seen) > m.cfg.TTL
}

// cached is a lease key as the watcher last saw it.
type cached struct {
	lease Lease
	rev   uint64
	seen  time.Time // when last seen written (a renewal), on the monotonic clock
}

// New creates (or updates) the bucket and checks the cluster's partition
// count against cfg.Partitions. Errors: ErrPartitionMismatch, or the
// server's, such as no JetStream quorum; New does not retry.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("ownership: %w", err)
	}
	kv, leasesNew, err := openBucket(ctx, js, cfg, 0)
	if err != nil {
		return nil, err
	}
	parts, partsNew, err := openPartitionsBucket(ctx, js, cfg)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		cfg:     cfg,
		js:      js,
		kv:      kv,
		parts:   parts,
		log:     cfg.Logger.With("node", cfg.Node),
		ready:   make(chan struct{}),
		poke:    make(chan struct{}, 1),
		rewatch: make(chan struct{}, 1),

		announcing: make(chan struct{}, 1),
	}
	m.initState()
	// Register the metrics only for a Manager that will run: a New that
	// fails (and is retried) must not leave collectors behind.
	if err := m.checkPartitions(ctx, partsNew && leasesNew); err != nil {
		return nil, err
	}
	if err := m.checkFormat(ctx); err != nil {
		return nil, err
	}
	if m.met, err = newMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	return m, nil
}

// initState makes the cache's maps.
func (m *Manager) initState() {
	m.mu.held = map[int]*held{}
	m.mu.leases = map[int]cached{}
	m.mu.nodes = map[string]time.Time{}
	m.mu.beats = map[string]time.Time{}
	m.mu.beatRevs = map[string]uint64{}
	m.mu.starts = map[string]string{}
	m.mu.lives = map[string]life{}
	m.mu.reads = map[string]int{}
	m.mu.free = map[int]time.Time{}
	m.mu.lastHolder = map[int]string{}
	m.mu.maxEpoch = map[int]uint64{}
	m.mu.garbled = map[int]cached{}
	m.mu.gaveUp = map[int]uint64{}
	m.mu.warming = map[int]*warming{}
	m.mu.peers = map[string]peerWarm{}
	m.mu.waits = map[int]warmWait{}
	m.mu.leaving = map[string]bool{}
}

// checkPartitions stores the partition count on first start and compares it
// on every later one, then loads the epoch counters' base. fresh says this
// node created both buckets now: the cluster's first start. A count the
// lease bucket holds (a cluster from before the partitions bucket) is the
// cluster's.
func (m *Manager) checkPartitions(ctx context.Context, fresh bool) error {
	want := strconv.Itoa(m.cfg.Partitions)
	existed := false
	if e, err := m.kv.Get(ctx, keyPartitions); err == nil {
		want = string(e.Value()) // compared below, once stored where it belongs
		existed = true
	}
	switch _, err := m.parts.Get(ctx, keyPartitions); {
	case err == nil:
		existed = true
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return fmt.Errorf("ownership: read the partition count: %w", err)
	}
	if !existed {
		// A new cluster: its shard count is stored before its partition
		// count, so a node that finds the partition count finds the
		// shard count too, or the cluster is older than shards.
		if err := m.createShards(ctx); err != nil {
			return err
		}
	}
	if _, err := m.parts.Create(ctx, keyPartitions, []byte(want)); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("ownership: store the partition count: %w", err)
	}
	e, err := m.parts.Get(ctx, keyPartitions)
	if err != nil {
		return fmt.Errorf("ownership: read the partition count: %w", err)
	}
	if got := string(e.Value()); got != strconv.Itoa(m.cfg.Partitions) {
		return fmt.Errorf("%w: the cluster has %s partitions and this node was started with %d; start it with the cluster's count",
			ErrPartitionMismatch, got, m.cfg.Partitions)
	}
	if err := m.checkShards(ctx); err != nil {
		return err
	}
	return m.loadEpochBase(ctx, fresh)
}

// Node returns this node's name.
func (m *Manager) Node() string { return m.cfg.Node }

// Partitions returns the partition count.
func (m *Manager) Partitions() int { return m.cfg.Partitions }

// Bucket returns the name of the lease bucket.
func (m *Manager) Bucket() string { return m.cfg.Bucket }

// TTL returns the lease TTL.
func (m *Manager) TTL() time.Duration { return m.cfg.TTL }

// Ready is closed once Run has taken its first round of leases.
func (m *Manager) Ready() <-chan struct{} { return m.ready }

// Owned returns this node's lease of partition p and the context that lives
// as long as it, if this node holds it now. It checks the lease's deadline:
// a lease past it is dropped here, before the caller can write under it.
func (m *Manager) Owned(p int) (Lease, context.Context, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.mu.held[p]
	if h == nil || h.ctx.Err() != nil {
		return Lease{}, nil, false
	}
	if !m.validLocked(h, time.Now()) {
		m.loseLocked(p, h, ErrLeaseExpired)
		return Lease{}, nil, false
	}
	return h.lease, h.ctx, true
}

// Owner returns the lease of partition p as this node last saw it, whoever
// holds it.
func (m *Manager) Owner(p int) (Lease, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.mu.leases[p]
	return c.lease, ok
}

// Lookup reads partition p's lease from the server rather than from the
// watched cache, which lags while the lease bucket's stream changes leader
// (its watcher's consumer is reset). ok is false when no lease is held.
func (m *Manager) Lookup(ctx context.Context, p int) (l Lease, ok bool, err error) {
	e, err := m.kv.Get(ctx, leaseKey(p))
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return Lease{}, false, nil
	}
	if err != nil {
		return Lease{}, false, fmt.Errorf("ownership: read the lease of partition %d: %w", p, err)
	}
	l, ok = parseLease(e.Key(), e.Value(), e.Revision())
	return l, ok, nil
}

// OwnedCount returns how many partitions this node holds.
func (m *Manager) OwnedCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.mu.held)
}

// Assigned returns how many partitions the balanced assignment over the
// live nodes, as this node sees them, gives this node now.
func (m *Manager) Assigned() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.assignedLocked()
}

// assignedLocked is Assigned. REQUIRES: m.mu held.
func (m *Manager) assignedLocked() int {
	if m.mu.stopping {
		return 0
	}
	n := 0
	for _, node := range m.wantLocked(m.liveLocked()) {
		if node == m.cfg.Node {
			n++
		}
	}
	return n
}

// wantLocked returns the node every partition should live on, given the
// live nodes: assign's answer, or once the active format reached
// KeepFormat, assignKeeping's with the holders this node sees. Those are
// the leases of the watch, but this node's own as this process holds
// them: not one it is handing off (so it does not count toward the
// bound, and what it keeps does not change while it goes), nor one it
// handed off or lost that the watch still shows. A lease of this node's
// name that it never held is from its last process and held by it.
// REQUIRES: m.mu held.
func (m *Manager) wantLocked(live []string) []string {
	if m.cfg.KeepFormat == 0 || m.mu.active < m.cfg.KeepFormat {
		return assign(m.cfg.Partitions, live)
	}
	return assignKeeping(m.cfg.Partitions, live, m.holdersLocked())
}

// holdersLocked returns the node holding each partition's lease as
// wantLocked counts it ("" for none). REQUIRES: m.mu held.
func (m *Manager) holdersLocked() []string {
	holders := make([]string, m.cfg.Partitions)
	for p := range holders {
		if h := m.mu.held[p]; h != nil {
			if !h.releasing {
				holders[p] = m.cfg.Node
			}
			continue
		}
		c, ok := m.mu.leases[p]
		if !ok {
			continue
		}
		if e, gone := m.mu.gaveUp[p]; gone && c.lease.Node == m.cfg.Node && c.lease.Epoch == e {
			continue
		}
		holders[p] = c.lease.Node
	}
	return holders
}

// Starved returns how long this node has held no partition while the
// assignment gives it some: 0 when it holds one, or is given none. A node
// that joins holds none until the others hand its share over (a renewal
// period or two); one that stays starved for a TTL cannot take leases
// (the lease bucket refuses its writes, or was lost).
func (m *Manager) Starved() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.noteStarvedLocked(time.Now())
	if m.mu.starvedSince.IsZero() {
		return 0
	}
	return time.Since(m.mu.starvedSince)
}

// noteStarvedLocked updates starvedSince. REQUIRES: m.mu held.
func (m *Manager) noteStarvedLocked(now time.Time) {
	if len(m.mu.held) > 0 || m.assignedLocked() == 0 {
		m.mu.starvedSince = time.Time{}
		return
	}
	if m.mu.starvedSince.IsZero() {
		m.mu.starvedSince = now
	}
}

// Nodes returns the live nodes' names, sorted.
func (m *Manager) Nodes() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.liveLocked()
}

// liveLocked returns the nodes partitions are assigned to: those seen
// heartbeating within a TTL and not leaving (drain.go), and this node
// unless it stops or drains.
func (m *Manager) liveLocked() []string {
	out := make([]string, 0, len(m.mu.nodes)+1)
	now := time.Now()
	for n := range m.mu.nodes {
		switch {
		case n == m.cfg.Node:
			continue // below
		case m.staleLocked(m.mu.beats[n], now):
			continue // no heartbeat seen for a TTL: dead, whatever the server still holds
		case m.mu.leaving[n]:
			continue // stopping: its partitions go to the others
		}
		out = append(out, n)
	}
	if !m.mu.stopping && !m.mu.draining {
		out = append(out, m.cfg.Node)
	}
	slices.Sort(out)
	return out
}

// Check reads partition p's lease from the server and drops it here if
// another node holds it now. Call it when a write conflicted.
func (m *Manager) Check(ctx context.Context, p int) error {
	m.mu.Lock()
	h := m.mu.held[p]
	m.mu.Unlock()
	if h == nil {
		return nil
	}
	e, err := m.kv.Get(ctx, leaseKey(p))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return fmt.Errorf("ownership: check partition %d: %w", p, err)
	default:
		if l, ok := parseLease(e.Key(), e.Value(), e.Revision()); ok && l == h.lease {
			return nil
		}
	}
	m.mu.Lock()
	if m.mu.held[p] == h {
		m.loseLocked(p, h, ErrLeaseLost)
	}
	m.mu.Unlock()
	return nil
}

// Quiet returns how long after the lease bucket was lost no lease is
// taken (RestoreBucket): a TTL and the election grace.
func (m *Manager) Quiet() time.Duration { return m.cfg.TTL + m.cfg.ElectionGrace }

// Restoring returns how long, after the lease bucket was lost and restored
// (RestoreBucket), this node still waits before it takes leases again; 0
// when it is not waiting.
func (m *Manager) Restoring() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return max(0, time.Until(m.mu.quietUntil))
}

// RestoreBucket is called when the lease bucket was deleted, deleted and
// created again, or purged under the running Manager (agentd's store guard
// notices it). Every lease of this node went with it, so the node stops
// serving its partitions at once (their contexts end with ErrBucketLost);
// the bucket is created again when it is missing (its first sequence past
// every revision this node saw, so epochs never go back), the partition
// count written again and the watch made again. For a TTL from now no
// lease is taken: by then every node has stopped serving the leases of the
// lost bucket (each stops TTL minus Margin after its last renewal, which
// was sent before the loss), so no partition has two holders. Then the
// partitions are taken as at a start.
func (m *Manager) RestoreBucket(ctx context.Context) error {
	m.mu.Lock()
	var top uint64
	for _, c := range m.mu.leases {
		top = max(top, c.rev)
	}
	for p, h := range m.mu.held {
		top = max(top, h.rev)
		m.loseLocked(p, h, ErrBucketLost)
	}
	top = max(top, m.mu.beatAcked, m.mu.ownSeen)
	clear(m.mu.leases)
	clear(m.mu.garbled)
	clear(m.mu.lastHolder)
	clear(m.mu.free)
	// A holder serves on the election grace while its renewals to the
	// lost bucket fail: the quiet lasts that long too.
	m.mu.quietUntil = time.Now().Add(m.Quiet())
	m.mu.Unlock()
	// The KV handle names the bucket: it works on the bucket made again.
	if _, _, err := openBucket(ctx, m.js, m.cfg, top+1); err != nil {
		return err
	}
	if err := m.checkPartitions(ctx, false); err != nil {
		return err
	}
	select {
	case m.rewatch <- struct{}{}:
	default:
	}
	m.log.Warn("lease bucket restored; partitions are taken again after a lease TTL and its election grace", "bucket", m.cfg.Bucket, "after", m.Quiet())
	return nil
}

// loseLocked drops h at once: its context is cancelled with cause, and its
// Serve goroutine finishes on its own.
func (m *Manager) loseLocked(p int, h *held, cause error) {
	delete(m.mu.held, p)
	m.mu.gaveUp[p] = h.lease.Epoch
	m.met.owned.Set(float64(len(m.mu.held)))
	h.cancel(cause)
	m.met.lost.WithLabelValues(causeLabel(cause)).Inc()
	m.log.Warn("partition lease lost", "partition", p, "epoch", h.lease.Epoch, "cause", cause)
	m.pokeLoop()
}

func causeLabel(err error) string {
	switch {
	case errors.Is(err, ErrLeaseExpired):
		return "expired"
	case errors.Is(err, ErrLeaseLost):
		return "conflict"
	case errors.Is(err, ErrBucketLost):
		return "bucket"
	}
	return "other"
}

func (m *Manager) pokeLoop() {
	select {
	case m.poke <- struct{}{}:
	default:
	}
}

// Run keeps this node's key alive, renews, acquires and hands off leases
// until ctx ends, then hands every partition off and returns nil.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	m.mu.started = time.Now()
	m.mu.Unlock()
	wctx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatch()
	w := newWatcher(m, wctx)
	if !m.firstWatch(ctx, w) {
		return nil
	}
	dogDone := make(chan struct{})
	go m.watchdog(wctx, dogDone)
	// The renewer and the rounds outlive ctx through a drain (drain.go):
	// the leases are renewed and handed off until it ends. Without a
	// drain, ctx's end cuts a round's writes short, as it always did (a
	// stop without quorum does not wait out their timeouts).
	lctx, endRounds := context.WithCancel(context.WithoutCancel(ctx))
	roundCtx := ctx
	defer endRounds()
	rctx, stopRenewer := context.WithCancel(lctx)
	defer stopRenewer()
	renewerDone := make(chan struct{})
	go m.renewer(rctx, renewerDone)
	stop := func() {
		endRounds()
		<-renewerDone // no renewal races the handoffs
		m.stop()
		stopWatch()
		<-dogDone
	}
	done := ctx.Done()
	var drainEnd <-chan time.Time
	var drainStart time.Time

	tick := time.NewTicker(m.cfg.RenewEvery)
	defer tick.Stop()
	// Between rounds, look for leases and nodes gone stale, and for
	// partitions to hand to a node that joined, a twentieth of a TTL at a
	// time (a round heartbeats only when one is due), and for a watcher
	// that lags this node's own heartbeat.
	check := time.NewTicker(max(m.cfg.TTL/20, 10*time.Millisecond))
	defer check.Stop()
	for {
		m.round(roundCtx)
		m.syncWarm()
		if err := m.behindErr(); err != nil {
			m.log.Error("this node cannot read the cluster's record format; it stops serving", "err", err)
			stop()
			return err
		}
		if drainEnd != nil && m.drained() {
			m.endDrain(drainStart)
			stop()
			return nil
		}
		select {
		case <-m.ready:
		default:
			close(m.ready)
			m.log.Info("partition leases taken", "owned", m.OwnedCount(), "nodes", m.Nodes())
		}
		for waiting := true; waiting; {
			select {
			case <-done:
				done = nil
				if !m.startDrain() {
					stop()
					return nil
				}
				drainStart, drainEnd = time.Now(), time.After(m.cfg.DrainWait)
				roundCtx = lctx
				waiting = false
			case <-drainEnd:
				m.endDrain(drainStart)
				stop()
				return nil
			case end := <-w.ends:
				w.ended(end)
			case <-w.retry:
				w.start(nil)
			case <-m.rewatch:
				w.start(nil)
				waiting = false
			case <-tick.C:
				waiting = false
			case <-check.C:
				w.checkLag()
				m.syncWarm()
				waiting = !m.dueBetweenRounds()
			case <-m.poke:
				waiting = false
			}
		}
	}
}

// firstWatch starts w and waits until the bucket's current keys are in.
// A watch that fails is made again with backoff, logged, until ctx ends:
// a node joining a cluster whose JetStream has not caught up with the meta
// leader sees its first watch time out (TestCluster/Join), and a bucket an
// operator deleted is made again by agentd's guard. Until then the node
// holds no lease and its health says so. It reports false when ctx ended.
func (m *Manager) firstWatch(ctx context.Context, w *watcher) bool {
	synced := make(chan struct{})
	w.start(synced)
	for failures := 0; ; failures++ {
		select {
		case <-synced:
			return true
		case <-ctx.Done():
			return false
		case end := <-w.ends:
			wait := backoff.Exp(100*time.Millisecond, m.cfg.RenewEvery, failures)
			m.log.Warn("the lease bucket cannot be watched yet; retrying",
				"err", end.err, "in", wait, "attempt", failures+1)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return false
			case <-t.C:
			}
			w.start(synced)
		}
	}
}

// watchdog drops every lease whose deadline passed, even while Run is
// blocked on the server.
func (m *Manager) watchdog(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(m.dogEvery())
	defer t.Stop()
	m.mu.Lock()
	m.mu.dogAt = time.Now()
	m.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		m.mu.Lock()
		if now.Sub(m.mu.dogAt) > m.graceFresh() {
			m.mu.pauseEnded = now // no grace for what was past its deadline meanwhile
		}
		m.mu.dogAt = now
		for p, h := range m.mu.held {
			if !m.validLocked(h, now) {
				m.loseLocked(p, h, ErrLeaseExpired)
			}
		}
		m.mu.Unlock()
	}
}

// watch follows every key of the bucket into the cache. It closes synced
// once the current values are in.
func (m *Manager) watch(ctx context.Context, gen int, synced chan struct{}) error {
	w, err := m.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("ownership: watch %s: %w", m.cfg.Bucket, err)
	}
	defer w.Stop()
	initial := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("ownership: lease watcher closed")
			}
			if e == nil {
				if initial {
					initial = false
					m.markFree()
					close(synced)
					m.pokeLoop() // a restarted watch may have found changes
				}
				continue
			}
			if m.applyFrom(gen, e) && !initial {
				m.pokeLoop()
			}
		}
	}
}

// markFree records every partition without a lease key as free now.
func (m *Manager) markFree() {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for p := range m.cfg.Partitions {
		if _, ok := m.mu.leases[p]; !ok {
			if _, ok := m.mu.free[p]; !ok {
				m.mu.free[p] = now
			}
		}
	}
}

// applyFrom puts one entry of the watch of generation gen into the cache.
// It reports whether the entry changed who is alive or who holds what (a
// renewal does not). An entry of a watch that was replaced (delivered
// late, older than what the new watch gave) is dropped; gen 0 applies
// always.
func (m *Manager) applyFrom(gen int, e jetstream.KeyValueEntry) bool {
	key := e.Key()
	gone := e.Operation() != jetstream.KeyValuePut
	m.mu.Lock()
	defer m.mu.Unlock()
	if gen != 0 && gen != m.mu.watchGen {
		return false
	}
	if now := time.Now(); now.Sub(m.mu.lastAny) > 2*m.cfg.RenewEvery {
		m.mu.resumedAt = now // the first write after a silence
	}
	m.mu.lastAny = time.Now()
	defer func() { m.met.nodes.Set(float64(len(m.mu.nodes))) }()
	switch {
	case strings.HasPrefix(key, prefixNode):
		node := key[len(prefixNode):]
		_, known := m.mu.nodes[node]
		if gone {
			if known {
				// Deleted, not expired nor purged: the node stopped in
				// order, its partitions handed off (Manager.stop).
				m.endLocked(node, time.Now(), e.Operation() == jetstream.KeyValueDelete)
			}
			delete(m.mu.nodes, node)
			delete(m.mu.beats, node)
			delete(m.mu.beatRevs, node)
			delete(m.mu.reads, node)
			delete(m.mu.peers, node)
			delete(m.mu.leaving, node)
			return known
		}
		if node == m.cfg.Node {
			m.mu.ownSeen = max(m.mu.ownSeen, e.Revision())
		}
		// A key that announces another start than the one seen is a
		// restart under the node's name: a new incarnation, seen alive
		// from now (incarnation.go).
		v := decodeNodeValue(e.Value())
		start := v.Started
		restarted := known && start != "" && m.mu.starts[node] != "" && start != m.mu.starts[node]
		if restarted {
			m.endLocked(node, time.Now(), false)
		}
		if !known || restarted {
			m.mu.nodes[node] = time.Now()
		}
		if start != "" {
			m.mu.starts[node] = start
		}
		m.mu.reads[node] = v.reads()
		// A partition announced warm that this node holds may go now; a
		// node that starts leaving changes the assignment.
		warmNews := m.warmNewsLocked(node, v.Warm)
		m.mu.peers[node] = peerWarm{announces: v.Warms, parts: v.Warm, drains: v.Drains}
		leaves := v.Leaving && node != m.cfg.Node && !m.mu.leaving[node]
		if v.Leaving {
			m.mu.leaving[node] = true
		} else {
			delete(m.mu.leaving, node)
		}
		if !known || restarted || m.mu.beatRevs[node] != e.Revision() {
			m.mu.beats[node] = time.Now()
			m.mu.beatRevs[node] = e.Revision()
		}
		return !known || restarted || leaves || warmNews
	case strings.HasPrefix(key, prefixLease):
		p, err := strconv.Atoi(key[len(prefixLease):])
		if err != nil || p < 0 || p >= m.cfg.Partitions {
			return false
		}
		old, had := m.mu.leases[p]
		g, wasGarbled := m.mu.garbled[p]
		delete(m.mu.garbled, p)
		if gone {
			delete(m.mu.leases, p)
			delete(m.mu.gaveUp, p)
			m.mu.free[p] = time.Now()
			if had {
				m.mu.lastHolder[p] = old.lease.Node
				m.recordMoveLocked(Move{Time: time.Now(), Partition: p, From: old.lease.Node, Epoch: old.lease.Epoch})
			}
			return had
		}
		l, ok := parseLease(key, e.Value(), e.Revision())
		if !ok {
			// Not a lease: the partition has no holder, and its key is
			// deleted a TTL after this write (plan), by then no holder
			// serves it (a holder's renewal fails on it).
			seen := time.Now()
			if wasGarbled && g.rev == e.Revision() {
				seen = g.seen
			} else {
				m.log.Warn("a lease key holds no lease; it is deleted after a TTL", "partition", p, "value", clipValue(e.Value()))
			}
			m.mu.garbled[p] = cached{lease: Lease{Partition: p}, rev: e.Revision(), seen: seen}
			delete(m.mu.leases, p)
			return had
		}
		seen := time.Now()
		if had && old.rev == e.Revision() {
			seen = old.seen // delivered again by a restarted watcher: no renewal
		}
		_, wasFree := m.mu.free[p]
		switch {
		case had && old.lease != l:
			m.recordMoveLocked(Move{Time: seen, Partition: p, From: old.lease.Node, To: l.Node, Epoch: l.Epoch})
		case !had && wasFree:
			m.recordMoveLocked(Move{Time: seen, Partition: p, From: m.mu.lastHolder[p], To: l.Node, Epoch: l.Epoch})
		}
		m.mu.leases[p] = cached{lease: l, rev: e.Revision(), seen: seen}
		if e, ok := m.mu.gaveUp[p]; ok && e != l.Epoch {
			delete(m.mu.gaveUp, p)
		}
		m.mu.maxEpoch[p] = max(m.mu.maxEpoch[p], l.Epoch)
		delete(m.mu.free, p)
		delete(m.mu.lastHolder, p)
		return !had || old.lease != l
	}
	return false
}
