package eventlog

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Owned views. A sharded log opened with Config.OwnedViews has Followers
// that apply only the partitions given to FollowPartition: a node's views
// then cost its own partitions' events, not the cluster's.
//
// A shard follower's members are then one per projection and followed
// partition of its shard, each on its projection's subject with the
// partition's token (<prefix>.evt.<p>.*), with a cursor and origin of its
// own in Pebble ("cp<p>", "op<p>"), committed with the rows. The shard
// follower reads the followed partitions of its shard through one ordered
// consumer with a filter per partition, so its events still come in stream
// order and a commit covers every followed partition up to its sequence.
//
// When the followed set changes (and then stays unchanged for ownedQuiet,
// at most ownedSettle), every Follower of the log stops the shard followers
// whose partitions changed, takes the new set, and starts them again from
// the stored cursors, while the others go on (followshards.go): a
// partition newly followed catches up alone from its own cursor (0 the
// first time) to the others, then joins them (Follower.catchUp), so its
// shard's views wait meanwhile; a partition no longer followed keeps its
// rows and its cursor, and resumes from there when it is followed again.
//
// WaitFor(seq) of an owned-views Follower waits until the Follower took
// the followed set as it is when WaitFor starts, then until every followed
// partition of seq's shard applied every event up to seq: seq of a
// partition not followed is covered once the followed ones applied every
// event stored before it (learnt from the stream when their consumer is
// idle). WaitFor(SeqEnds) waits for each followed partition's last event;
// WaitPartition(p) for p's last event alone, in p's shard (a new owner's
// recovery of p). A wait that sees its shard follower make no progress
// for renewAfter while behind has it recreate its consumer from its last
// applied event (Follower.renew): one on a server that died, or placed
// where its stream elects, would otherwise hold the recovery until the
// client library notices missed heartbeats (10 s), or for as long as its
// server still sends them.
//
// A view kept with every partition (shard cursors "c<k>") and opened with
// owned views starts each partition's cursor at its shard's; the view is
// then marked ("m"), and a view so marked that is opened without owned
// views is rebuilt, since its partitions may be at different points.

// ownedParts is the set of partitions an OwnedViews log follows.
type ownedParts struct {
	mu      sync.Mutex
	parts   map[int]int   // FollowPartitions not yet undone, by partition
	gen     uint64        // counts the changes of parts
	changed chan struct{} // closed and replaced when parts changes
}

// state returns the followed partitions in order, the set's generation and
// a channel closed at its next change.
func (o *ownedParts) state() ([]int, uint64, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.changed == nil {
		o.changed = make(chan struct{})
	}
	out := make([]int, 0, len(o.parts))
	for p := range o.parts {
		out = append(out, p)
	}
	slices.Sort(out)
	return out, o.gen, o.changed
}

// set counts a FollowPartition (on) or an UnfollowPartition of p.
func (o *ownedParts) set(p int, on bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.parts == nil {
		o.parts = map[int]int{}
	}
	n := o.parts[p]
	switch {
	case on:
		o.parts[p] = n + 1
		if n > 0 {
			return
		}
	case n == 0:
		return
	case n > 1:
		o.parts[p] = n - 1
		return
	default:
		delete(o.parts, p)
	}
	o.gen++
	if o.changed != nil {
		close(o.changed)
	}
	o.changed = make(chan struct{})
}

// FollowPartition makes the Followers of an OwnedViews log apply partition
// p's events too, until as many UnfollowPartition(p) (so an owner's
// release of p that ends after its next acquisition began does not stop
// the views of that one). It returns at once: a WaitFor that starts after it (for
// example WaitFor of LastSeq) waits until the views caught p up. Errors:
// ErrInvalid for a log without OwnedViews or p out of range.
func (l *Log) FollowPartition(p int) error {
	if err := l.checkPart(p); err != nil {
		return err
	}
	l.owned.set(p, true)
	return nil
}

// UnfollowPartition undoes one FollowPartition(p); the last one stops
// applying partition p's events. Its rows and cursors stay, and FollowPartition later resumes from them. Errors as
// FollowPartition's.
func (l *Log) UnfollowPartition(p int) error {
	if err := l.checkPart(p); err != nil {
		return err
	}
	l.owned.set(p, false)
	return nil
}

// FollowedPartitions returns the partitions the Followers apply, in order;
// nil for a log without OwnedViews (they apply every partition). The
// caller owns the slice.
func (l *Log) FollowedPartitions() []int {
	if !l.cfg.OwnedViews {
		return nil
	}
	parts, _, _ := l.owned.state()
	return parts
}

// OwnedViews reports whether the log's Followers apply only the followed
// partitions (Config.OwnedViews).
func (l *Log) OwnedViews() bool { return l.cfg.OwnedViews }

func (l *Log) checkPart(p int) error {
	if !l.cfg.OwnedViews {
		return invalidf("follow partition %d: the log was opened without OwnedViews", p)
	}
	if p < 0 || p >= l.cfg.Partitions {
		return invalidf("follow partition %d: want 0 to %d", p, l.cfg.Partitions-1)
	}
	return nil
}

// owning reports whether f applies only the followed partitions.
func (f *Follower) owning() bool { return f.l.cfg.OwnedViews && (f.shards != nil || f.parent != nil) }

// partSubject returns subject (a projection's, with "*" for the
// partition) with partition p's token instead.
func (l *Log) partSubject(subject string, p int) string {
	for _, kind := range []string{".evt.*.", ".chunk.*."} {
		head := l.cfg.Prefix + kind
		if rest, ok := strings.CutPrefix(subject, head); ok {
			return l.cfg.Prefix + kind[:len(kind)-2] + strconv.Itoa(p) + "." + rest
		}
	}
	return subject // not reached: every projection subject has the token
}

// partWide returns every subject of partition p of one kind.
func (l *Log) partWide(p int, chunks bool) string {
	kind := ".evt."
	if chunks {
		kind = ".chunk."
	}
	return l.cfg.Prefix + kind + strconv.Itoa(p) + ".>"
}

// takeParts sets every shard follower's members to one per projection and
// followed partition of its shard, and returns the generation of the set
// taken. REQUIRES: Run's goroutine, no shard follower consuming.
func (f *Follower) takeParts() (uint64, <-chan struct{}) {
	parts, gen, ch := f.l.owned.state()
	want := make([][]int, len(f.shards))
	for _, p := range parts {
		want[p%len(f.shards)] = append(want[p%len(f.shards)], p)
	}
	for k, s := range f.shards {
		f.takeShardParts(s, want[k])
	}
	return gen, ch
}

// takeShardParts sets shard follower s's members to one per projection
// and partition of parts (of its shard, in order). REQUIRES: Run's
// goroutine, s not consuming.
func (f *Follower) takeShardParts(s *Follower, parts []int) {
	s.members = s.members[:0]
	for _, p := range parts {
		for _, t := range f.members {
			m := newMember(t.p, f.l.partSubject(t.subject, p), f.wide, "p"+strconv.Itoa(p))
			m.part = p
			s.members = append(s.members, m)
		}
	}
}

// partsFollowed returns the partitions shard follower s has members of,
// in order. REQUIRES: Run's goroutine of its parent, s not consuming or
// its members unchanged meanwhile.
func (s *Follower) partsFollowed() []int {
	var out []int
	for _, m := range s.members {
		if len(out) == 0 || out[len(out)-1] != m.part {
			out = append(out, m.part)
		}
	}
	return out
}

// subjectsOf returns the subjects a consumer applying to group reads:
// group's subject, or every subject of the stream (wide) when the group's
// members read different ones; with owned views, that for each partition
// of the group, so the filters never overlap.
func (f *Follower) subjectsOf(group []*member) []string {
	if !f.owning() {
		if len(group) == 1 || allSame(group) {
			return []string{group[0].subject}
		}
		return []string{f.wide}
	}
	byPart := map[int]string{}
	var parts []int
	for _, m := range group {
		s, seen := byPart[m.part]
		switch {
		case !seen:
			byPart[m.part] = m.subject
			parts = append(parts, m.part)
		case s != m.subject:
			byPart[m.part] = f.l.partWide(m.part, f.l.handleOf(f.stream).chunks)
		}
	}
	slices.Sort(parts)
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = byPart[p]
	}
	return out
}

// lastSeqOf returns the last sequence of any of subjects in f's stream.
func (f *Follower) lastSeqOf(ctx context.Context, subjects []string) (Seq, error) {
	var last Seq
	for _, s := range subjects {
		seq, err := f.l.lastSeq(ctx, f.stream, s)
		if err != nil {
			return 0, err
		}
		last = max(last, seq)
	}
	return last, nil
}

// setIdle records whether f's consumer has delivered every event stored
// when it delivered its last one (an owned-views shard follower), and
// tells WaitFor when that changes.
func (f *Follower) setIdle(idle bool) {
	if !f.owning() {
		return // only waitShardOwned reads it
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.idle == idle {
		return
	}
	f.mu.idle = idle
	f.bumpLocked()
}

// WaitPartition blocks until every projection of f applied every event of
// partition p stored when it is called: what a new owner waits for before
// it recovers p's agents. With owned views (Config.OwnedViews) that is
// p's events alone, in p's shard: another partition catching up (from its
// first event, or after a change of the followed set), or another shard's
// stream electing its leader, does not hold it; a p not followed returns
// at once, as WaitFor of its sequence does. Without owned views the views
// have one cursor a shard, so it waits for the log's end, WaitFor of
// LastSeq(Filter{}). It waits for f to be ready (Ready) first: asked
// while f started, it answered before p's views had caught up, and a
// node just restarted announced partitions warm that it caught up only
// once it owned them, 1.9 s later (stop 60's chaos). Errors: ErrInvalid for p out of range (a log without
// Config.Partitions takes any p >= 0), ctx's, and WaitFor's.
func (f *Follower) WaitPartition(ctx context.Context, p int) error {
	if p < 0 || (f.l.cfg.Partitions > 0 && p >= f.l.cfg.Partitions) {
		return invalidf("wait for partition %d: want 0 to %d", p, f.l.cfg.Partitions-1)
	}
	select {
	case <-f.Ready():
	case <-ctx.Done():
		return ctx.Err()
	}
	if f.shards != nil && f.owning() {
		_, gen, _ := f.l.owned.state()
		return f.waitOwnedSince(ctx, SeqEnds, []int{p}, gen)
	}
	last, err := f.l.LastSeq(ctx, Filter{})
	if err != nil {
		return err
	}
	return f.WaitFor(ctx, last)
}

// waitOwned is WaitFor of an owned-views Follower.
func (f *Follower) waitOwned(ctx context.Context, seq Seq) error {
	parts, gen, _ := f.l.owned.state()
	return f.waitOwnedSince(ctx, seq, parts, gen)
}

// waitOwnedSince is waitOwned from the followed partitions parts, of
// generation gen, as they were when the wait began.
func (f *Follower) waitOwnedSince(ctx context.Context, seq Seq, parts []int, gen uint64) error {
	start := time.Now()
	var genWait time.Duration // until the followers took the partitions followed
	var shardWaits []any      // each slow shard's wait, for the log
	defer func() {
		// A new owner's wait that held its partitions' agents for 10 s in
		// chaos runs logged nothing of where it waited (stop 58).
		if took := time.Since(start); took > renewAfter {
			f.l.logger.Info("a wait for the owned views was slow", append([]any{"subsystem", "projection", "stream", f.stream, "took", took, "parts", parts, "gen_wait", genWait}, shardWaits...)...)
		}
	}()
	if err := f.await(ctx, func() bool { return f.mu.gen >= gen }); err != nil {
		return err
	}
	genWait = time.Since(start)
	shards := f.shards
	if seq != SeqEnds {
		s, err := f.shardOf(seq)
		if err != nil {
			return err
		}
		shards = []*Follower{s}
	}
	for _, s := range shards {
		if !slices.ContainsFunc(parts, func(p int) bool { return p%len(f.shards) == s.shard }) {
			continue // nothing of this shard is followed
		}
		// The subjects of the partitions of s followed since the wait
		// began (in parts, and followed now), for a lookup of their last
		// sequence (made only when needed). A partition released
		// meanwhile is not waited for: its events no longer move the
		// cursor, so a last event of it past the others' would never be
		// reached (a wait of a partition's recovery that hung when the
		// node released another partition of the shard).
		subjects := func() []string {
			now, _, _ := f.l.owned.state()
			var out []string
			for _, p := range parts {
				if p%len(f.shards) != s.shard || !slices.Contains(now, p) {
					continue
				}
				for _, t := range f.members {
					if sub := f.l.partSubject(t.subject, p); !slices.Contains(out, sub) {
						out = append(out, sub)
					}
				}
			}
			return out
		}
		t0 := time.Now()
		err := s.waitShardOwned(ctx, seq, subjects)
		if d := time.Since(t0); d > time.Second {
			shardWaits = append(shardWaits, "shard_"+strconv.Itoa(s.shard), d)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// waitShardOwned waits until shard follower s applied every event of
// subjects up to seq (SeqEnds: up to their last one now). subjects may
// change with the followed partitions: while s's consumer is idle, their
// last sequence is looked up again after each change.
func (s *Follower) waitShardOwned(ctx context.Context, seq Seq, subjects func() []string) error {
	// The generation of the followed partitions at the last lookup of
	// their last sequence, if there was one.
	queried, queriedGen := false, uint64(0)
	lookup := func() (Seq, error) {
		_, gen, _ := s.l.owned.state()
		queried, queriedGen = true, gen
		return s.lastSeqOf(ctx, subjects())
	}
	if seq == SeqEnds {
		last, err := lookup()
		if err != nil {
			return err
		}
		seq = last
	}
	stuckAt, stuckSince := Seq(0), time.Now() // the cursor, and since when unchanged
	var renew *time.Timer                     // fires when a renewal is due; made at the first wait
	defer func() {
		if renew != nil {
			renew.Stop()
		}
	}()
	for {
		s.mu.Lock()
		cur, ch, err, idle := s.mu.cursor, s.mu.changed, s.mu.err, s.mu.idle
		s.mu.Unlock()
		_, gen, owned := s.l.owned.state()
		if cur >= seq {
			return nil
		}
		if err != nil {
			return err
		}
		if idle && (!queried || gen != queriedGen) {
			// seq may be of a partition not followed (or no longer): the
			// followed ones hold every event stored before it once they
			// applied their last event stored now.
			last, err := lookup()
			if err != nil {
				return err
			}
			if last < seq {
				seq = last
				continue
			}
		}
		// A consumer that delivers nothing while the wait is behind is
		// recreated after renewAfter without progress (its server died,
		// or it was placed where its stream elects): a recovery waits on
		// it, where nats.go would recreate it only after two missed
		// heartbeats, or never while its server still sends them.
		if cur != stuckAt {
			stuckAt, stuckSince = cur, time.Now()
		} else if time.Since(stuckSince) >= renewAfter && s.renew != nil {
			select {
			case s.renew <- struct{}{}:
			default:
			}
			stuckSince = time.Now()
		}
		due := max(renewAfter-time.Since(stuckSince), 0)
		if renew == nil {
			renew = time.NewTimer(due)
		} else {
			renew.Reset(due)
		}
		select {
		case <-ch:
		case <-owned:
		case <-renew.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// renewAfter is how long a wait of an owned-views shard follower sees no
// progress while behind before it asks for a new consumer (Follower.renew),
// and how long a catch-up's consumer may deliver nothing before it is
// recreated (Follower.consume).
const renewAfter = 2 * time.Second

// Keys of a view kept with owned views (see above).
const (
	ownedMark = 'm'
)

// markOwned makes m's view (a member of an owned-views shard follower) an
// owned-views one, if it is not yet: every partition's cursor and origin
// start at its shard's, which go. REQUIRES: db in use.
func (f *Follower) markOwned(db *pebble.DB, m *member) error {
	base := projPrefix(m.p.Name)
	mark := append(append([]byte{}, base...), ownedMark)
	if _, err := get(db, mark); err == nil {
		return nil
	} else if !errors.Is(err, ErrNotFound) {
		return err
	}
	b := db.NewBatch()
	defer b.Close()
	shards := f.l.cfg.Shards
	for k := range shards {
		ck := append(append(append([]byte{}, base...), 'c'), strconv.Itoa(k)...)
		ok := append(append(append([]byte{}, base...), 'o'), strconv.Itoa(k)...)
		c, cerr := get(db, ck)
		if cerr != nil && !errors.Is(cerr, ErrNotFound) {
			return cerr
		}
		o, oerr := get(db, ok)
		if oerr != nil && !errors.Is(oerr, ErrNotFound) {
			return oerr
		}
		for p := k; p < f.l.cfg.Partitions; p += shards {
			suffix := "p" + strconv.Itoa(p)
			if cerr == nil {
				if err := b.Set(append(append(append([]byte{}, base...), 'c'), suffix...), c, nil); err != nil {
					return err
				}
			}
			if oerr == nil {
				if err := b.Set(append(append(append([]byte{}, base...), 'o'), suffix...), o, nil); err != nil {
					return err
				}
			}
		}
		if err := b.Delete(ck, nil); err != nil {
			return err
		}
		if err := b.Delete(ok, nil); err != nil {
			return err
		}
	}
	if err := b.Set(mark, []byte{1}, nil); err != nil {
		return err
	}
	return f.l.commitView(b)
}

// markedOwned reports whether m's view was kept with owned views.
// REQUIRES: db in use.
func markedOwned(db *pebble.DB, m *member) (bool, error) {
	_, err := get(db, append(append([]byte{}, projPrefix(m.p.Name)...), ownedMark))
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}
