package ownership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// action is one step of a round, planned under the lock and run outside it.
type action struct {
	kind  actionKind
	p     int
	stale bool      // takeover: of another node's lease it stopped renewing
	seen  time.Time // stale takeover: when its last renewal was seen
	rev   uint64    // takeover, drop: the key's revision
	h     *held     // handoff
	to    string    // handoff: the node it is assigned to
	how   string    // handoff: how that node's views are (warm.go)
}

type actionKind int

const (
	// acquire a free partition.
	acquire actionKind = iota
	// takeover a lease this node's name held before a restart.
	takeover
	// drop such a lease that is meant for another node now, or a lease
	// key that holds no lease (garbled).
	drop
	// handoff a held partition to the node it is assigned to.
	handoff
)

// roundWorkers bounds the acquisitions, takeovers and drops of one round
// in flight at once.
const roundWorkers = 16

// round renews this node's key and leases, then acquires and hands off
// partitions toward the assignment of the live nodes.
func (m *Manager) round(ctx context.Context) {
	if time.Since(m.renewed) >= m.cfg.RenewEvery {
		m.renewed = time.Now()
		m.mu.Lock()
		timeout := m.cfg.RenewEvery
		if m.mu.beatFailing {
			timeout = m.retryEvery() // the renewer retries it meanwhile
		}
		m.mu.Unlock()
		m.heartbeat(ctx, timeout)
		m.formatBehind(ctx)
	}
	// The writes of different partitions are independent, so they go
	// roundWorkers at a time: a node that starts with 64 free partitions
	// takes them in the time of a few acquisitions, not of 64 in a row
	// (each reads and bumps its epoch counter, a synced write).
	var g errgroup.Group
	g.SetLimit(roundWorkers)
	// What the round moves that is news: partitions handed to other nodes
	// (a node joined), or taken from a node that stopped renewing (one was
	// lost). Acquiring a free partition is the other half of a handoff
	// and spreads over rounds as keys are deleted: DEBUG only.
	var handing, takingOver int
	for _, a := range m.plan() {
		if ctx.Err() != nil {
			break
		}
		if a.kind == takeover && a.stale {
			takingOver++
		}
		switch a.kind {
		case acquire:
			g.Go(func() error { m.acquire(ctx, a.p); return nil })
		case takeover:
			g.Go(func() error { m.takeover(ctx, a.p, a.rev, a.seen); return nil })
		case drop:
			g.Go(func() error {
				if err := m.kv.Delete(ctx, leaseKey(a.p), jetstream.LastRevision(a.rev)); err != nil {
					m.log.Debug("drop an old lease of this node, or a key that holds no lease", "partition", a.p, "err", err)
				}
				return nil
			})
		case handoff:
			// Claimed here, not in the goroutine: a check between rounds
			// that runs before it would plan (and count) it again.
			if m.claimHandoff(a.h) {
				handing++
				m.handedTo(a)
				m.handoffs.Go(func() { m.handoff(a.p, a.h) })
			}
		}
	}
	g.Wait()
	if ctx.Err() != nil {
		return
	}
	m.mu.Lock()
	m.noteStarvedLocked(time.Now())
	m.mu.Unlock()
	select {
	case <-m.ready:
		// A rebalance (a node joined or was lost) is one line, however
		// many partitions move; each partition's own lines are DEBUG. The
		// first round's are "partition leases taken".
		if handing > 0 || takingOver > 0 {
			m.log.Info("partitions rebalanced", "handing_off", handing, "taking_over", takingOver, "nodes", m.Nodes())
		}
	default:
	}
}

// plan compares the cache with the assignment.
func (m *Manager) plan() []action {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.stopping || now.Before(m.mu.quietUntil) {
		return nil
	}
	live := m.liveLocked()
	want := m.wantLocked(live)
	me := m.cfg.Node
	var out []action
	for p := range m.cfg.Partitions {
		h := m.mu.held[p]
		c, leased := m.mu.leases[p]
		if h == nil || want[p] == me {
			delete(m.mu.waits, p)
		}
		switch {
		case h != nil:
			if h.releasing || want[p] == me {
				continue
			}
			// Hand off only to a node seen alive for a renewal period, so a
			// node that flaps does not drag partitions back and forth, or
			// at once to a restart of a node whose last process heartbeat
			// twice or stopped in order (incarnation.go).
			// And once its views are ready for it (warm.go).
			if !m.dueLocked(want[p], now) {
				continue
			}
			if how, ok := m.handoffReadyLocked(p, want[p], now); ok {
				out = append(out, action{kind: handoff, p: p, h: h, to: want[p], how: how})
			}
		case leased && c.lease.Node != me && m.staleLocked(c.seen, now) && want[p] == me:
			// Its holder has not renewed it for a TTL: take it by a
			// compare-and-set on the revision last seen, without waiting
			// for the server to expire the key. A renewal meanwhile makes
			// the write fail.
			out = append(out, action{kind: takeover, p: p, rev: c.rev, stale: true, seen: c.seen})
		case leased && c.lease.Node == me:
			// A lease of this node's name that this process does not hold:
			// written before a restart.
			if want[p] == me {
				out = append(out, action{kind: takeover, p: p, rev: c.rev})
			} else {
				out = append(out, action{kind: drop, p: p, rev: c.rev})
			}
		case leased:
		case m.mu.garbled[p].rev != 0:
			// A key that holds no lease: deleted by a compare-and-set
			// on its revision once a TTL passed since it was written,
			// so no holder of the lease it replaced serves any more;
			// then the partition is free.
			if g := m.mu.garbled[p]; want[p] == me && m.staleLocked(g.seen, now) {
				out = append(out, action{kind: drop, p: p, rev: g.rev})
			}
		case m.mu.draining:
			// Stopping: this node takes nothing (a free partition meant
			// for a node that has not taken it included).
		case want[p] == me:
			out = append(out, action{kind: acquire, p: p})
		default:
			// Free but meant for another node: take it if that node has not
			// for a whole TTL, so no partition stays unserved; or at once
			// when that node is the one whose lease of it just went away
			// (expired: it stopped renewing, and its own node key is about
			// to expire too), rather than wait a TTL for a dead node. The
			// assignment moves it on by handoff once the live set changes.
			since, ok := m.mu.free[p]
			// After a lost bucket every partition is free at once: the
			// other nodes take theirs when their quiet TTL ends, not later.
			if since.Before(m.mu.quietUntil) {
				since = m.mu.quietUntil
			}
			if ok && (now.Sub(since) > m.cfg.TTL || m.mu.lastHolder[p] == want[p]) {
				out = append(out, action{kind: acquire, p: p})
			}
		}
	}
	return out
}

// dueBetweenRounds reports whether plan would take over a lease its holder
// stopped renewing, or hand a partition off to a node due it now (seen
// alive for a renewal period, or a stable node's restart: dueLocked):
// what a check between renewals acts on. A node that joins then gets its
// partitions within a check of becoming due, not at the holder's next
// round, up to a renewal period later, and from every holder at about the
// same time.
func (m *Manager) dueBetweenRounds() bool {
	for _, a := range m.plan() {
		if a.stale || a.kind == handoff {
			return true
		}
	}
	return false
}

// renewer renews the held leases every RenewEvery until ctx ends, in its
// own goroutine, so that nothing Run waits on (acquisitions, a heartbeat,
// the format) delays a renewal. Renewals, and the heartbeat, whose last
// attempt failed without a conflict (the bucket electing a leader) are
// retried every retryEvery, each waiting at most a quarter of a renewal
// period for its answer: a lease on the election grace sees a fresh
// attempt within graceFresh (validLocked), and is renewed within a retry
// period of the bucket's return.
func (m *Manager) renewer(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(m.retryEvery())
	defer t.Stop()
	var full time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.announcing:
			m.heartbeat(ctx, m.retryEvery())
			continue
		case <-t.C:
		}
		m.mu.Lock()
		beat := m.mu.beatFailing && !m.mu.stopping
		failing := false
		for _, h := range m.mu.held {
			failing = failing || (h.failing && !h.releasing)
		}
		m.mu.Unlock()
		timeout := m.cfg.RenewEvery
		if failing {
			// Short enough that a lease on the grace sees a fresh attempt
			// within graceFresh, long enough for a slow bucket's answer.
			timeout = max(m.retryEvery(), m.cfg.RenewEvery/4)
		}
		switch {
		case time.Since(full) >= m.cfg.RenewEvery:
			full = time.Now()
			m.renew(ctx, false, timeout)
		case failing:
			m.renew(ctx, true, timeout)
		}
		if beat {
			m.heartbeat(ctx, m.retryEvery())
		}
	}
}

// heartbeat writes this node's key with the key TTL, waiting at most
// timeout for the server's answer.
func (m *Manager) heartbeat(ctx context.Context, timeout time.Duration) {
	m.mu.Lock()
	stopping, started := m.mu.stopping, m.mu.started
	m.mu.Unlock()
	if stopping {
		return
	}
	// Built and sent in order (beatMu): the renewer's announcement of a
	// warm partition must not be overwritten by an older value.
	m.beatMu.Lock()
	m.mu.Lock()
	warm := m.warmPartsLocked()
	leaving := m.mu.draining
	m.mu.Unlock()
	b, _ := json.Marshal(nodeValue{Started: started.Format(time.RFC3339Nano), Reads: m.cfg.Format,
		Warms: m.cfg.Prepare != nil, Warm: warm, Leaving: leaving, Drains: !m.noDrains})
	fut, err := m.js.PublishMsgAsync(&nats.Msg{Subject: m.subject(prefixNode + m.cfg.Node), Data: b},
		jetstream.WithMsgTTL(m.keyTTL()))
	m.beatMu.Unlock()
	var ack *jetstream.PubAck
	if err == nil {
		ack, err = awaitAck(ctx, fut, timeout)
	}
	m.mu.Lock()
	failing := m.mu.beatFailing
	m.mu.beatFailing = err != nil
	m.mu.Unlock()
	if err != nil {
		if !failing {
			m.log.Warn("node heartbeat", "err", err)
		}
		return
	}
	m.mu.Lock()
	if ack.Sequence > m.mu.beatAcked {
		m.mu.beatAcked, m.mu.beatAckedAt = ack.Sequence, time.Now()
	}
	m.mu.Unlock()
}

// awaitAck waits up to timeout for fut's acknowledgement.
func awaitAck(ctx context.Context, fut jetstream.PubAckFuture, timeout time.Duration) (*jetstream.PubAck, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case ack := <-fut.Ok():
		return ack, nil
	case err := <-fut.Err():
		return nil, err
	case <-t.C:
		return nil, fmt.Errorf("no answer within %s", timeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (m *Manager) subject(key string) string { return "$KV." + m.cfg.Bucket + "." + key }

// renew extends every held lease (with failing, only those whose last
// renewal failed) by a compare-and-set on its revision, all in flight at
// once, waiting at most timeout for the answers. A conflict means another
// node holds the lease now, unless the key still holds this lease (a
// renewal that landed but whose answer was lost: its revision is taken);
// any other failure, or no answer in time, marks the lease failing: the
// renewer retries it, and it is served on the election grace (validLocked).
func (m *Manager) renew(ctx context.Context, failing bool, timeout time.Duration) {
	if m.beforeRenew != nil {
		m.beforeRenew()
	}
	type pending struct {
		p    int
		h    *held
		sent time.Time
		fut  jetstream.PubAckFuture
	}
	m.mu.Lock()
	var todo []pending
	for p, h := range m.mu.held {
		if !h.releasing && (!failing || h.failing) {
			todo = append(todo, pending{p: p, h: h})
		}
	}
	m.mu.Unlock()
	var failed []int // renewals that failed without a conflict, or got no answer
	var firstErr error
	fail := func(t *pending, err error) {
		m.mu.Lock()
		if m.mu.held[t.p] == t.h && !t.h.failing {
			t.h.failing = true
			failed = append(failed, t.p)
			if firstErr == nil {
				firstErr = err
			}
		}
		m.mu.Unlock()
	}
	defer func() {
		if len(failed) > 0 {
			slices.Sort(failed)
			m.log.Warn("lease renewals failed; retrying them", "partitions", failed, "every", m.retryEvery(), "err", firstErr)
		}
	}()
	for i := range todo {
		t := &todo[i]
		m.mu.Lock()
		rev := t.h.rev
		t.sent = time.Now()
		if m.cfg.Conn.IsConnected() {
			t.h.tried = t.sent // an attempt that can reach the bucket: the grace's evidence
		}
		m.mu.Unlock()
		b, _ := json.Marshal(leaseValue{Node: m.cfg.Node, Epoch: t.h.lease.Epoch})
		fut, err := m.js.PublishMsgAsync(&nats.Msg{Subject: m.subject(leaseKey(t.p)), Data: b},
			jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(m.keyTTL()))
		if err != nil {
			fail(t, err)
			continue
		}
		t.fut = fut
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for i := range todo {
		t := &todo[i]
		if t.fut == nil {
			continue
		}
		select {
		case ack := <-t.fut.Ok():
			m.mu.Lock()
			if m.mu.held[t.p] == t.h && !t.h.releasing {
				t.h.rev = ack.Sequence
				t.h.until = t.sent.Add(m.cfg.TTL - m.cfg.Margin)
				if t.h.graced {
					m.log.Info("lease renewed after the election grace", "partition", t.p, "epoch", t.h.lease.Epoch)
				}
				t.h.failing, t.h.graced = false, false
			}
			m.mu.Unlock()
			m.met.renewals.Inc()
		case err := <-t.fut.Err():
			if isConflict(err) {
				m.conflicted(ctx, t.p, t.h)
				continue
			}
			fail(t, err)
		case <-timer.C:
			for j := i; j < len(todo); j++ {
				if todo[j].fut != nil {
					fail(&todo[j], fmt.Errorf("no answer within %s", timeout))
				}
			}
			return
		case <-ctx.Done():
			return
		}
	}
}

// conflicted handles a renewal of h that failed its compare-and-set: the
// lease is lost, unless the key still holds it at a newer revision (an
// earlier renewal landed, its answer lost with the bucket's leader), which
// then becomes the one the next renewal expects.
func (m *Manager) conflicted(ctx context.Context, p int, h *held) {
	gctx, cancel := context.WithTimeout(ctx, m.retryEvery())
	e, err := m.kv.Get(gctx, leaseKey(p))
	cancel()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.held[p] != h {
		return
	}
	if err == nil {
		if l, ok := parseLease(e.Key(), e.Value(), e.Revision()); ok && l == h.lease {
			h.rev, h.failing = e.Revision(), true // renewed again at the next retry
			return
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted) {
		h.failing = true // unknown yet: read again at the next retry's conflict
		return
	}
	m.loseLocked(p, h, ErrLeaseLost)
}

// isConflict reports a failed compare-and-set.
func isConflict(err error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) {
		return api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return errors.Is(err, jetstream.ErrKeyExists)
}

// acquire creates the lease key of a free partition, with the next epoch
// (see epoch.go).
func (m *Manager) acquire(ctx context.Context, p int) {
	sent := time.Now()
	actx, cancel := context.WithTimeout(ctx, m.cfg.RenewEvery)
	defer cancel()
	epoch, crev, ok := m.epochFor(actx, p)
	if !ok {
		return
	}
	b, _ := json.Marshal(leaseValue{Node: m.cfg.Node, Epoch: epoch})
	rev, err := m.kv.Create(actx, leaseKey(p), b, jetstream.KeyTTL(m.keyTTL()))
	if err != nil {
		if !isConflict(err) {
			m.log.Warn("acquire lease", "partition", p, "err", err)
		}
		return
	}
	m.counted(actx, Lease{Partition: p, Node: m.cfg.Node, Epoch: epoch}, rev, crev, sent)
}

// takeover replaces a lease by a compare-and-set on its revision: one this
// node's name held before a restart, or one whose holder stopped renewing
// it (stale, last seen renewed at seen). Its epoch is the next one, so
// nothing the old holder still had in flight passes the fence. A stale
// takeover more than a TTL and 5 s after the last renewal is a slow
// failover (forever_ownership_slow_failovers_total).
func (m *Manager) takeover(ctx context.Context, p int, rev uint64, seen time.Time) {
	sent := time.Now()
	actx, cancel := context.WithTimeout(ctx, m.cfg.RenewEvery)
	defer cancel()
	epoch, crev, ok := m.epochFor(actx, p)
	if !ok {
		return
	}
	b, _ := json.Marshal(leaseValue{Node: m.cfg.Node, Epoch: epoch})
	ack, err := m.js.PublishMsg(actx, &nats.Msg{Subject: m.subject(leaseKey(p)), Data: b},
		jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(m.keyTTL()))
	if err != nil {
		if !isConflict(err) {
			m.log.Warn("take over lease", "partition", p, "err", err)
		}
		return
	}
	if !seen.IsZero() && time.Since(seen) > m.cfg.TTL+slowFailover {
		m.met.slowFailovers.Inc()
	}
	m.counted(actx, Lease{Partition: p, Node: m.cfg.Node, Epoch: epoch}, ack.Sequence, crev, sent)
}

// slowFailover is how much later than a lease TTL after its holder's last
// renewal a takeover counts as slow: a JetStream election (4 to 9 s) on top
// of the TTL fits in it rarely, a node that fails to see the holder's death
// never.
const slowFailover = 5 * time.Second

// epochFor returns the epoch of an acquisition of partition p and the
// counter's revision; ok is false when the counter cannot be read.
func (m *Manager) epochFor(ctx context.Context, p int) (epoch, crev uint64, ok bool) {
	m.mu.Lock()
	seen := m.seenEpochLocked(p)
	m.mu.Unlock()
	epoch, crev, err := m.nextEpoch(ctx, p, seen)
	if err != nil {
		m.log.Warn("read the epoch counter", "partition", p, "err", err)
		return 0, 0, false
	}
	if m.afterEpochRead != nil {
		m.afterEpochRead(p)
	}
	return epoch, crev, true
}

// counted moves the counter to a lease just written at rev and serves it,
// or, when another acquisition counted first, deletes it unserved.
func (m *Manager) counted(ctx context.Context, l Lease, rev, crev uint64, sent time.Time) {
	if err := m.bumpEpoch(ctx, l.Partition, l.Epoch, crev); err != nil {
		m.log.Debug("epoch counted by another acquisition; lease dropped unserved", "partition", l.Partition, "epoch", l.Epoch, "err", err)
		if err := m.release(ctx, l.Partition, l, rev); err != nil {
			m.log.Warn("delete an unserved lease; it expires by its TTL", "partition", l.Partition, "err", err)
		}
		return
	}
	m.start(l, rev, sent)
}

// start serves a lease just written at rev, its write sent at sent.
func (m *Manager) start(l Lease, rev uint64, sent time.Time) {
	ctx, cancel := context.WithCancelCause(context.Background())
	h := &held{lease: l, rev: rev, until: sent.Add(m.cfg.TTL - m.cfg.Margin),
		ctx: ctx, cancel: cancel, done: make(chan struct{})}
	m.mu.Lock()
	m.mu.held[l.Partition] = h
	m.met.owned.Set(float64(len(m.mu.held)))
	m.mu.leases[l.Partition] = cached{lease: l, rev: rev, seen: sent}
	delete(m.mu.free, l.Partition)
	m.mu.Unlock()
	m.met.acquired.Inc()
	m.log.Debug("partition acquired", "partition", l.Partition, "epoch", l.Epoch)
	m.serving.Go(func() {
		defer close(h.done)
		if m.cfg.Serve == nil {
			<-ctx.Done()
			return
		}
		m.cfg.Serve(ctx, l)
	})
}

// claimHandoff marks h as being handed off, and reports whether this
// caller did (false: another handoff of it is under way).
func (m *Manager) claimHandoff(h *held) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h.releasing {
		return false
	}
	h.releasing = true
	return true
}

// handoff stops serving h's partition, claimed by claimHandoff, waits for
// Serve (bounded), and deletes the key so the next owner acquires it at
// once; a key it could not delete expires by its TTL, and the failure is
// logged.
func (m *Manager) handoff(p int, h *held) {
	if err := m.handoffClaimed(p, h, true); err != nil {
		m.log.Warn("delete handed-off lease; it expires by its TTL", "partition", p, "err", err)
	}
}

// handoffKeep claims h and hands it off, returning the error deleting the
// key rather than logging it; with release false, the key is left to
// expire by its TTL.
func (m *Manager) handoffKeep(p int, h *held, release bool) error {
	if !m.claimHandoff(h) {
		return nil
	}
	return m.handoffClaimed(p, h, release)
}

// handoffClaimed is handoffKeep of a partition already claimed.
func (m *Manager) handoffClaimed(p int, h *held, release bool) error {
	start := time.Now()
	h.cancel(ErrHandoff)
	t := time.NewTimer(m.cfg.HandoffTimeout)
	defer t.Stop()
	select {
	case <-h.done:
	case <-t.C:
		m.log.Warn("partition did not stop in time; handing it off anyway (its writes are fenced)",
			"partition", p, "timeout", m.cfg.HandoffTimeout)
	}
	m.mu.Lock()
	rev := h.rev
	if m.mu.held[p] == h {
		delete(m.mu.held, p)
		m.mu.gaveUp[p] = h.lease.Epoch
		m.met.owned.Set(float64(len(m.mu.held)))
	}
	m.mu.Unlock()
	var err error
	if release {
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.RenewEvery)
		err = m.release(ctx, p, h.lease, rev)
		cancel()
	}
	m.met.handoff.Observe(time.Since(start).Seconds())
	m.log.Debug("partition handed off", "partition", p, "took", time.Since(start))
	return err
}

// stop hands every partition off: first this node's key goes, so the others
// plan without it, then every partition stops and its key is deleted.
//
// When the node key cannot be deleted, the lease bucket has no quorum (the
// last nodes of a cluster stopping, peers gone): every other write would
// wait out its timeout and fail the same way, so the partitions stop
// without deleting their keys, which expire by their TTL, and one INFO
// line says so. An orderly stop logs no line per partition.
func (m *Manager) stop() {
	m.mu.Lock()
	m.mu.stopping = true
	hs := make(map[int]*held, len(m.mu.held))
	for p, h := range m.mu.held {
		hs[p] = h
	}
	m.mu.Unlock()
	m.stopWarm() // none starts again: syncWarm sees stopping
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.RenewEvery)
	nerr := m.kv.Delete(ctx, prefixNode+m.cfg.Node)
	cancel()
	if nerr != nil {
		m.log.Info("the lease bucket does not answer (no JetStream quorum?): partitions stop without deleting their leases, which expire by their TTL",
			"count", len(hs), "err", nerr)
	}
	var mu sync.Mutex
	var failed []int
	var first error
	for p, h := range hs {
		m.handoffs.Go(func() {
			if err := m.handoffKeep(p, h, nerr == nil); err != nil {
				mu.Lock()
				failed = append(failed, p)
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	m.handoffs.Wait()
	if len(failed) > 0 {
		slices.Sort(failed)
		m.log.Warn("handed-off leases not deleted; they expire by their TTL", "partitions", failed, "err", first)
	}
	m.log.Info("partitions handed off", "count", len(hs))
}

// release deletes lease l of partition p, expected at revision rev. A
// renewal that landed after rev was read moves the revision on: then the
// key is read again and deleted if it still holds l.
func (m *Manager) release(ctx context.Context, p int, l Lease, rev uint64) error {
	err := m.kv.Delete(ctx, leaseKey(p), jetstream.LastRevision(rev))
	if err == nil || !isConflict(err) {
		return err
	}
	e, gerr := m.kv.Get(ctx, leaseKey(p))
	if gerr != nil {
		if errors.Is(gerr, jetstream.ErrKeyNotFound) {
			return nil
		}
		return gerr
	}
	if cur, ok := parseLease(e.Key(), e.Value(), e.Revision()); !ok || cur != l {
		return nil // somebody else's now
	}
	return m.kv.Delete(ctx, leaseKey(p), jetstream.LastRevision(e.Revision()))
}
