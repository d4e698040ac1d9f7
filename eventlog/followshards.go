package eventlog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/forever-agents/forever/internal/backoff"
)

// A Follower of a log with several shards follows each shard's stream with
// a shard follower of its own: one ordered consumer per shard, a cursor per
// shard and view in Pebble (the member keys of its shard), committed with
// the rows. The shard followers' commits take turns (applyMu), so a view's
// rows are read and written by one commit at a time, as with one stream.
//
// A Seq names its shard (shards.go), so WaitFor waits for the shard
// follower of that shard; WaitFor(SeqEnds) waits for every shard's last
// event as it is when WaitFor reads it.
//
// Opening (versions, origins, cursors) and the drops it makes run in the
// Follower's goroutine while no shard follower consumes; a view dropped by
// one shard (its rows are shared) is replayed by every shard: the pass
// over the shards starts again, and finds the other shards' cursors gone
// with the rows. A rebuild (Rebuild, RestartViews) stops every shard
// follower, drops, and starts them all again. A change of the followed
// partitions (owned views) stops and opens only the shard followers whose
// partitions changed (retake), with drops refused (noDrop): an open that
// would drop a view stops every shard follower and opens them all, since
// a drop under a shard follower still committing would leave it rows and
// a cursor of a view that no longer has them. Bootstrap is not used: the
// views replay their shards.

// waitShards is WaitFor of a Follower with shards.
func (f *Follower) waitShards(ctx context.Context, seq Seq) error {
	if seq != SeqEnds {
		s, err := f.shardOf(seq)
		if err != nil {
			return err
		}
		return s.WaitFor(ctx, seq)
	}
	for _, s := range f.shards {
		last, err := f.l.lastSeq(ctx, s.stream, s.wide)
		if err != nil {
			return err
		}
		if err := s.WaitFor(ctx, last); err != nil {
			return err
		}
	}
	return nil
}

// Changed returns a channel closed the next time a cursor of f moves (any
// shard's) or f starts over or stops: a reader that keeps what it read of
// the views waits on it to read them again.
func (f *Follower) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.changed
}

// shardOf returns the shard follower of seq's shard.
func (f *Follower) shardOf(seq Seq) (*Follower, error) {
	k, _ := ShardOf(seq)
	if k >= len(f.shards) {
		return nil, invalidf("wait for seq %d: it names shard %d of a log with %d", seq, k, len(f.shards))
	}
	return f.shards[k], nil
}

// bump tells WaitFor and Changed of f that something moved.
func (f *Follower) bump() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bumpLocked()
}

// bumpLocked is bump with f.mu held.
func (f *Follower) bumpLocked() {
	close(f.mu.changed)
	f.mu.changed = make(chan struct{})
}

// shardReady is told by a shard follower that it caught up: f is ready
// once every shard is.
func (f *Follower) shardReady() {
	for _, s := range f.shards {
		select {
		case <-s.ready:
		default:
			return
		}
	}
	f.markReady()
}

// stopShards sets every shard follower's Run error (their WaitFor then
// returns it).
func (f *Follower) stopShards(stopped error) {
	for _, s := range f.shards {
		s.mu.Lock()
		s.mu.err = stopped
		close(s.mu.changed)
		s.mu.changed = make(chan struct{})
		s.mu.Unlock()
	}
}

// runShards is run of a Follower with shards.
func (f *Follower) runShards(ctx context.Context) error {
	for _, s := range f.shards {
		s.mu.Lock()
		s.mu.started, s.mu.err = true, nil
		s.mu.Unlock()
		s.logger = f.logger.With("shard", s.shard)
	}
	return f.run(ctx)
}

// openShards opens every shard follower from the stored cursors, dropping
// what open finds stale, until a pass over the shards drops nothing: a
// drop removed the view's rows and every shard's cursor, so the shards
// opened before it must read theirs again. With rebuild, every view is
// dropped first.
func (f *Follower) openShards(ctx context.Context, rebuild bool) error {
	if rebuild {
		for _, m := range f.members {
			if err := f.dropView(m.p.Name); err != nil {
				return err
			}
		}
	}
	for pass := 0; ; pass++ {
		drops := f.drops
		for _, s := range f.shards {
			if err := s.open(ctx); err != nil {
				return err
			}
		}
		if f.drops == drops {
			break
		}
		if pass > len(f.shards) {
			return fmt.Errorf("%s: the shards keep dropping the views while they open", f.what())
		}
	}
	for _, s := range f.shards {
		s.publish()
	}
	return nil
}

// followShards is one life of a Follower with shards, as follow is of one
// stream.
func (f *Follower) followShards(ctx context.Context) error {
	reset, rebuild := f.l.resetOf(f.stream)
	for _, s := range f.shards {
		s.reset = reset
	}
	rebuilding := rebuild != f.rebuilt
	if rebuilding {
		f.logger.Warn("projections rebuilt from the streams as they are now (their events were removed)", "stream", f.stream)
	}
	var gen uint64
	var owned <-chan struct{}
	if f.owning() {
		gen, owned = f.takeParts()
	}
	if err := f.openShards(ctx, rebuilding); err != nil {
		return err
	}
	if rebuilding {
		f.rebuilt = rebuild
		f.mu.Lock()
		f.mu.rebuilds = rebuild
		f.mu.Unlock()
	}
	f.mu.Lock()
	f.mu.life++
	f.mu.gen = gen
	f.mu.Unlock()
	f.bump()
	for {
		req, err := f.consumeShards(ctx, owned)
		if err != nil || req == nil {
			return err
		}
		if req.owned {
			// The followed partitions changed: take them, open the new
			// ones' cursors, and let catchUp bring them up to the others.
			gen, owned = f.takeParts()
			if err := f.openShards(ctx, false); err != nil {
				return err
			}
			f.mu.Lock()
			f.mu.gen = gen
			f.mu.Unlock()
			f.bump()
			continue
		}
		// A rebuild asked by Rebuild: drop the view (every shard's cursor
		// goes with its rows) and open again, before replying, so a WaitFor
		// after Rebuild waits for the replay.
		err = f.dropView(req.name)
		if err == nil {
			err = f.openShards(ctx, false)
		}
		req.done <- err
		if err != nil {
			return err
		}
	}
}

// consumeShards runs every shard follower (each catches its views up,
// then follows live) until ctx ends (nil, nil), one of them fails, or
// Rebuild asks for a rebuild, returned once every shard follower stopped.
//
// A change of the followed partitions (owned) restarts only the shard
// followers whose partitions changed, once the changes stopped coming for
// ownedQuiet (retake): a node taking its partitions from several holders
// at once restarts each shard about once, and the shards it took nothing
// of not at all, rather than every shard at every change. A change that
// would drop a view (opening a partition found its rows stale) stops them
// all and returns a rebuildReq with owned set: followShards opens every
// shard again.
func (f *Follower) consumeShards(ctx context.Context, owned <-chan struct{}) (*rebuildReq, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	failed := make(chan *shardRun, len(f.shards))
	runs := make([]*shardRun, len(f.shards))
	for k, s := range f.shards {
		runs[k] = s.startRun(sctx, failed)
	}
	stopAll := func() {
		for _, r := range runs {
			r.cancel()
		}
		for _, r := range runs {
			<-r.done
		}
	}
	// A shard follower that failed on JetStream being unavailable (its
	// stream electing a leader: a leader read of its last sequence timed
	// out) starts again alone after a backoff, the others going on: failing
	// the Follower stopped every shard and made the whole node's views
	// wait, and each new owner's recovery with them, 5 s and more in chaos
	// runs (stop 58). again gets the failed run when its restart is due; a
	// retake that restarted the shard meanwhile replaced it in runs.
	fails := make([]int, len(f.shards))           // failures in a row, for the backoff
	restarted := make([]time.Time, len(f.shards)) // when each last started again
	again := make(chan *shardRun)
	for {
		select {
		case <-ctx.Done():
			stopAll()
			return nil, nil
		case r := <-f.rebuildCh:
			stopAll()
			return &r, nil
		case r := <-failed:
			k := slices.Index(runs, r)
			if k < 0 {
				continue // a run a retake replaced
			}
			if !Transient(r.err) {
				stopAll()
				return nil, r.err
			}
			<-r.done
			if time.Since(restarted[k]) > 30*time.Second {
				fails[k] = 0 // it ran a while since: not a failure in a row
			}
			wait := backoff.Exp(100*time.Millisecond, 5*time.Second, fails[k])
			fails[k]++
			f.logger.Warn("a shard's views wait for JetStream; retrying that shard", "shard", k, "err", r.err, "in", wait, "attempt", fails[k])
			time.AfterFunc(wait, func() {
				select {
				case again <- r:
				case <-sctx.Done():
				}
			})
		case r := <-again:
			if k := slices.Index(runs, r); k >= 0 {
				runs[k] = f.shards[k].startRun(sctx, failed)
				restarted[k] = time.Now()
			}
		case <-owned:
			f.settleOwned(ctx)
			var err error
			if owned, err = f.retake(sctx, runs, failed); err != nil {
				stopAll()
				if errors.Is(err, errDropAll) {
					return &rebuildReq{owned: true}, nil
				}
				return nil, err
			}
		}
	}
}

// errDropAll is the error of a drop by a shard follower opening alone
// (noDrop): every shard follower must stop first.
var errDropAll = errors.New("eventlog: a view must be dropped with every shard stopped")

// ownedQuiet is how long the followed partitions must stay unchanged
// before the shard followers take a change, and ownedSettle the longest a
// change waits for that: acquisitions landing together restart a shard
// follower once.
const (
	ownedQuiet  = 20 * time.Millisecond
	ownedSettle = 200 * time.Millisecond
)

// settleOwned waits until the followed partitions stayed unchanged for
// ownedQuiet, at most ownedSettle, or ctx ends.
func (f *Follower) settleOwned(ctx context.Context) {
	deadline := time.Now().Add(ownedSettle)
	for {
		wait := min(ownedQuiet, time.Until(deadline))
		if wait <= 0 {
			return
		}
		_, _, changed := f.l.owned.state()
		t := time.NewTimer(wait)
		select {
		case <-changed:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
			return
		}
	}
}

// shardRun is one life of a shard follower's consumer.
type shardRun struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when it returned
	err    error         // why it failed, set before done closes
}

// startRun runs followShard until ctx ends or it is cancelled; a failure
// of its own is sent to failed.
func (s *Follower) startRun(ctx context.Context, failed chan<- *shardRun) *shardRun {
	rctx, cancel := context.WithCancel(ctx)
	r := &shardRun{cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	s.mu.starts++
	s.mu.Unlock()
	s.l.metrics.shardStarts.Inc()
	go func() {
		defer close(r.done)
		err := s.followShard(rctx)
		if err == nil || rctx.Err() != nil {
			return
		}
		r.err = fmt.Errorf("shard %d: %w", s.shard, err)
		select {
		case failed <- r:
		case <-rctx.Done():
		}
	}()
	return r
}

// retake takes the followed partitions as they are now: the shard
// followers whose partitions changed stop, take their new members, open
// them from the stored cursors while the others go on, and start again.
// It returns the channel of the next change. Errors: errDropAll when an
// open would drop a view, open's.
func (f *Follower) retake(ctx context.Context, runs []*shardRun, failed chan<- *shardRun) (<-chan struct{}, error) {
	parts, gen, owned := f.l.owned.state()
	want := make([][]int, len(f.shards))
	for _, p := range parts {
		want[p%len(f.shards)] = append(want[p%len(f.shards)], p)
	}
	var changed []*Follower
	for k, s := range f.shards {
		if !slices.Equal(s.partsFollowed(), want[k]) {
			changed = append(changed, s)
			runs[k].cancel()
		}
	}
	for _, s := range changed {
		<-runs[s.shard].done
		f.takeShardParts(s, want[s.shard])
		s.noDrop = true
		err := s.open(ctx)
		s.noDrop = false
		if err != nil {
			return nil, err
		}
		s.publish()
	}
	f.mu.Lock()
	f.mu.gen = gen
	f.mu.Unlock()
	f.bump()
	for _, s := range changed {
		runs[s.shard] = s.startRun(ctx, failed)
	}
	return owned, nil
}

// followShard is what a shard follower does in each life of its Follower:
// catch the views behind up, then follow its stream live.
func (f *Follower) followShard(ctx context.Context) error {
	// A run that ends (its partitions changed, the Follower stops) takes
	// its lag with it: left, the last lag it saw would stand for a shard
	// nobody follows here, never to go down.
	defer f.clearLag()
	if len(f.members) == 0 {
		// An owned-views shard follower with no partition followed.
		f.markReady()
		select {
		case <-ctx.Done():
			return nil
		case <-f.reset:
			return errRestart
		}
	}
	for {
		if err := f.catchUp(ctx); err != nil {
			return err
		}
		req, err := f.consume(ctx, f.members, f.head(), 0)
		if err != nil || req == nil {
			return err
		}
		// A shard follower is never asked for a rebuild itself.
		req.done <- invalidf("rebuild through the Follower, not a shard of it")
	}
}

// clearLag deletes the lag series of this shard follower's projections.
// REQUIRES: called by its committer.
func (f *Follower) clearLag() {
	for _, m := range f.members {
		if m.lag != nil {
			f.l.metrics.lag.DeleteLabelValues(m.p.Name, f.stream)
			m.lag = nil
		}
	}
}

// shardsWhat names a Follower with shards in its logger.
func (f *Follower) shardsWhat() string {
	return fmt.Sprintf("%d shards of %s, projections %s", len(f.shards), f.stream, strings.Join(f.Names(), ","))
}

// dropView drops the view called name (its rows, and every shard's and
// partition's cursor) through a shard follower.
func (f *Follower) dropView(name string) error {
	s := f.shards[0]
	m := s.member(name)
	if m == nil {
		// An owned-views shard follower without the partitions: a member
		// of its own, whose cursor and origin keys nothing reads.
		m = newMember(f.member(name).p, "", "", "x")
	}
	return s.drop(m)
}
