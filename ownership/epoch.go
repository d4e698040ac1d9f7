package ownership

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Epochs. A lease's epoch is a per-partition counter: the first lease of a
// partition in a new cluster has epoch 1, and every acquisition (a free
// partition, a takeover, a restarted node taking its lease back) the next
// number. It is kept in the key epoch.<p> of the partitions bucket, on
// file storage, so it survives the lease key's expiry and the loss of the
// lease bucket (memory storage). (It was the KV revision of the acquiring write, which
// grows with every write of the bucket: 57 before a restart, 4412 after.)
//
// An acquisition reads the counter (value e, revision r), writes the lease
// with epoch max(e, the highest epoch seen for the partition)+1, and then
// moves the counter to that epoch by a compare-and-set on r. Only if that
// succeeds does it serve; otherwise it deletes its lease and tries again
// later. So epochs only grow along the leases that serve: a lease X that
// served moved the counter after X's key was written; any later lease
// Y was written after X's key was gone, and its counter write expects a
// revision read before Y's key was written; if that read came before X's
// counter write, Y's counter write fails and Y never serves, and if after,
// Y's epoch is above X's. Two leases that were written and never served may
// share an epoch; neither wrote anything.
const (
	prefixEpoch = "epoch."
	// keyEpochBase holds the epoch counters' start: 0 in a cluster created
	// with counters; in a cluster created before, the bucket's last
	// revision when the first node with counters started, which is above
	// every epoch issued as a revision before.
	keyEpochBase = "config.epochs"
)

func epochKey(p int) string { return prefixEpoch + strconv.Itoa(p) }

// loadEpochBase reads the counters' start, storing it first if the cluster
// has none: 0 when fresh (this node created the cluster), else the lease
// bucket's last revision, above every epoch issued as a revision before
// the counters (or before the partitions bucket was lost). Whatever is
// stored wins, so every node uses one base.
func (m *Manager) loadEpochBase(ctx context.Context, fresh bool) error {
	e, err := m.parts.Get(ctx, keyEpochBase)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		var base uint64
		if !fresh {
			st, err := m.kv.Status(ctx)
			if err != nil {
				return fmt.Errorf("ownership: read the lease bucket's revision: %w", err)
			}
			if s, ok := st.(*jetstream.KeyValueBucketStatus); ok {
				base = revisionBase(s.StreamInfo())
			}
		}
		if _, err := m.parts.Create(ctx, keyEpochBase, []byte(strconv.FormatUint(base, 10))); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("ownership: store the epoch base: %w", err)
		}
		e, err = m.parts.Get(ctx, keyEpochBase)
	}
	if err != nil {
		return fmt.Errorf("ownership: read the epoch base: %w", err)
	}
	base, err := strconv.ParseUint(string(e.Value()), 10, 64)
	if err != nil {
		return fmt.Errorf("ownership: epoch base %q: %w", e.Value(), err)
	}
	m.epochBase = base
	return nil
}

// revisionBase is the epoch base a node that did not create the cluster
// stores: the lease bucket's last revision when it holds anything (a
// cluster whose leases took their epochs from revisions, still running),
// else 0. Nodes of a new cluster start at once, so one that did not
// create the buckets may store the base first; the lease bucket then
// holds nothing yet, and its last revision (the creation's time-based
// first sequence, less one) is no epoch anyone issued. (A cluster from
// before the counters whose lease bucket emptied entirely, every node
// stopped past the markers' TTL, starts its counters at 0 too; verify's
// writer rule then reports the old epochs above the new.)
func revisionBase(info *jetstream.StreamInfo) uint64 {
	if info.State.Msgs == 0 && info.State.LastSeq < info.State.FirstSeq {
		return 0
	}
	return info.State.LastSeq
}

// nextEpoch reads partition p's counter and returns the epoch of the next
// acquisition, above the counter, the base and seen (an epoch of the
// partition this node saw), and the counter's revision for bumpEpoch (0:
// no counter yet). A counter that does not parse is taken as garbledFloor,
// so the acquisition repairs it.
func (m *Manager) nextEpoch(ctx context.Context, p int, seen uint64) (next, rev uint64, err error) {
	cur := m.epochBase
	e, err := m.parts.Get(ctx, epochKey(p))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return 0, 0, err
	default:
		v, perr := strconv.ParseUint(string(e.Value()), 10, 64)
		if perr != nil {
			// A garbled counter is repaired, not a partition nobody can
			// acquire: the acquisition's compare-and-set on its revision
			// overwrites it with an epoch above any it can have held
			// (garbledFloor).
			m.log.Warn("the epoch counter does not parse; the next acquisition overwrites it", "partition", p, "value", clipValue(e.Value()))
			v = garbledFloor(m.epochBase, e.Revision(), time.Now())
		}
		cur, rev = max(cur, v), e.Revision()
	}
	return max(cur, seen) + 1, rev, nil
}

// garbledFloor is an epoch above every acquisition a garbled counter at
// revision rev of the partitions bucket may have counted. The counters
// start at base and each acquisition counted is one write of the bucket,
// so none of them went past base plus the bucket's revisions; a counter
// restored from a backup may have, so the floor is at least now in
// microseconds too, which counting by one per acquisition never reaches
// (and which a client's JSON number still holds exactly).
func garbledFloor(base, rev uint64, now time.Time) uint64 {
	return max(base+rev, uint64(now.UnixMicro()))
}

// clipValue quotes at most 64 bytes of a stored value in a log line.
func clipValue(v []byte) string {
	if len(v) > 64 {
		return strconv.Quote(string(v[:64])) + "..."
	}
	return strconv.Quote(string(v))
}

// bumpEpoch moves partition p's counter to next, expecting it at revision
// rev (0: absent). A conflict is another acquisition counted since.
func (m *Manager) bumpEpoch(ctx context.Context, p int, next, rev uint64) error {
	v := []byte(strconv.FormatUint(next, 10))
	if rev == 0 {
		_, err := m.parts.Create(ctx, epochKey(p), v)
		return err
	}
	_, err := m.parts.Update(ctx, epochKey(p), v, rev)
	return err
}

// seenEpochLocked is the highest epoch this node saw for partition p.
// REQUIRES: m.mu held.
func (m *Manager) seenEpochLocked(p int) uint64 {
	s := m.mu.maxEpoch[p]
	if c, ok := m.mu.leases[p]; ok {
		s = max(s, c.lease.Epoch)
	}
	return s
}

// EpochKeyPrefix starts the keys of the partitions bucket that hold the
// epoch counters: EpochKeyPrefix + the partition number. A backup keeps
// them (agentd/backup), so a restored cluster's epochs go on above the
// log's.
const EpochKeyPrefix = prefixEpoch
