package ownership

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// entry is a watched KV entry, as the lease watcher receives it.
type entry struct {
	key string
	val []byte
	rev uint64
	op  jetstream.KeyValueOp
}

// apply is applyFrom for an entry of no particular watch.
func (m *Manager) apply(e jetstream.KeyValueEntry) bool { return m.applyFrom(0, e) }

func (e entry) Bucket() string                  { return "FOREVER_LEASES" }
func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return e.val }
func (e entry) Revision() uint64                { return e.rev }
func (e entry) Created() time.Time              { return time.Now() }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return e.op }

// planner returns a Manager of node me with only what plan reads.
func planner(me string, partitions int) *Manager {
	m := &Manager{cfg: Config{Node: me, Partitions: partitions, TTL: 10 * time.Second, RenewEvery: 2500 * time.Millisecond}}
	met, err := newMetrics(nil)
	if err != nil {
		panic(err)
	}
	m.met = met
	m.initState()
	return m
}

// acquires returns the partitions plan would acquire.
func acquires(m *Manager) map[int]bool {
	out := map[int]bool{}
	for _, a := range m.plan() {
		if a.kind == acquire {
			out[a.p] = true
		}
	}
	return out
}

// TestPlanTakesAnExpiredLeaseAtOnce: when a lease expires while its holder
// is still counted live (its node key outlives the lease by up to a
// renewal period), the other nodes acquire the partition at once instead
// of waiting a further TTL for the dead holder to take it back; a
// partition freed by a handoff to a third node is still left to that node.
func TestPlanTakesAnExpiredLeaseAtOnce(t *testing.T) {
	const parts = 12
	m := planner("b", parts)
	for _, n := range []string{"a", "b", "c"} {
		m.apply(entry{key: prefixNode + n, val: []byte(`{}`), rev: 1, op: jetstream.KeyValuePut})
	}
	want := assign(parts, []string{"a", "b", "c"})
	var ofA []int
	for p := range parts {
		if want[p] == "a" {
			ofA = append(ofA, p)
		}
	}
	if len(ofA) < 2 {
		t.Fatalf("assignment %v gives a fewer than 2 partitions", want)
	}
	// Every partition held as assigned, except the first of a's, which c
	// still holds (a joined a moment ago, c has not handed it off yet).
	moving := ofA[0]
	for p := range parts {
		holder := want[p]
		if p == moving {
			holder = "c"
		}
		v, _ := json.Marshal(leaseValue{Node: holder, Epoch: uint64(p + 1)})
		m.apply(entry{key: leaseKey(p), val: v, rev: uint64(p + 1), op: jetstream.KeyValuePut})
	}
	if got := acquires(m); len(got) != 0 {
		t.Fatalf("with every lease held, plan acquires %v", got)
	}
	// c hands the moving partition off to a: it deletes its lease.
	m.apply(entry{key: leaseKey(moving), rev: 100, op: jetstream.KeyValueDelete})
	if got := acquires(m); got[moving] {
		t.Fatalf("b takes partition %d, which c handed off to a", moving)
	}
	// a dies: its leases expire (TTL markers), its node key not yet.
	for _, p := range ofA[1:] {
		m.apply(entry{key: leaseKey(p), rev: 101, op: jetstream.KeyValueDelete})
	}
	got := acquires(m)
	for _, p := range ofA[1:] {
		if !got[p] {
			t.Errorf("partition %d, whose holder a let its lease expire, is not acquired at once: %v", p, got)
		}
	}
	if got[moving] {
		t.Errorf("b takes partition %d, handed off to a", moving)
	}
}

// TestPlanTakesStaleLeases: a node whose heartbeat and lease renewals have
// not been seen for a TTL is dead to the plan, even while the server
// still holds its keys (their expiry can come late): the nodes its
// partitions are now assigned to take them over, by compare-and-set on
// the revision last seen, and nobody else does. A fresh lease is left.
func TestPlanTakesStaleLeases(t *testing.T) {
	const parts = 12
	m := planner("b", parts)
	for _, n := range []string{"a", "b", "c"} {
		m.apply(entry{key: prefixNode + n, val: []byte(`{}`), rev: 1, op: jetstream.KeyValuePut})
	}
	for p := range parts {
		m.apply(entry{key: leaseKey(p), val: []byte(`{"node":"a","epoch":7}`), rev: uint64(100 + p), op: jetstream.KeyValuePut})
	}
	if got := stale(m); len(got) != 0 {
		t.Fatalf("takeovers of fresh leases: %v", got)
	}
	// a stops: nothing of it is seen for more than a TTL.
	old := time.Now().Add(-m.cfg.TTL - time.Second)
	m.mu.beats["a"] = old
	for p := range parts {
		c := m.mu.leases[p]
		c.seen = old
		m.mu.leases[p] = c
	}
	// While the watcher itself delivers nothing, nobody is judged dead.
	m.mu.lastAny = old
	if got := stale(m); len(got) != 0 {
		t.Fatalf("takeovers while the watcher is silent: %v", got)
	}
	// The watcher delivers again after its silence (the bucket elected a
	// leader): a holder that could not renew through the election gets
	// resumeGrace to be seen renewing before it is judged dead.
	m.mu.lastAny, m.mu.resumedAt = time.Now(), time.Now()
	if got := stale(m); len(got) != 0 {
		t.Fatalf("takeovers just after the watcher resumed: %v", got)
	}
	m.mu.resumedAt = old      // it resumed long ago
	m.mu.lastAny = time.Now() // b's own heartbeat, seen
	want := assign(parts, []string{"b", "c"})
	got := stale(m)
	for p := range parts {
		if (want[p] == "b") != (got[p] != 0) {
			t.Errorf("partition %d (assigned to %s): takeover at %d", p, want[p], got[p])
		}
		if got[p] != 0 && got[p] != uint64(100+p) {
			t.Errorf("partition %d taken over at revision %d, want the last seen %d", p, got[p], 100+p)
		}
	}
	if nodes := m.Nodes(); len(nodes) != 2 {
		t.Errorf("live nodes %v, want b and c", nodes)
	}
	// A restarted watcher delivers every key again: unchanged revisions
	// are no renewal and no heartbeat.
	m.apply(entry{key: prefixNode + "a", val: []byte(`{}`), rev: 1, op: jetstream.KeyValuePut})
	for p := range parts {
		m.apply(entry{key: leaseKey(p), val: []byte(`{"node":"a","epoch":7}`), rev: uint64(100 + p), op: jetstream.KeyValuePut})
	}
	if again := stale(m); len(again) != len(got) {
		t.Errorf("after the same keys delivered again: %d takeovers, want %d", len(again), len(got))
	}
	if nodes := m.Nodes(); len(nodes) != 2 {
		t.Errorf("after a's key delivered again: live nodes %v, want b and c", nodes)
	}
	// A renewal seen again: the lease is fresh.
	m.apply(entry{key: leaseKey(0), val: []byte(`{"node":"a","epoch":7}`), rev: 200, op: jetstream.KeyValuePut})
	if got := stale(m); got[0] != 0 {
		t.Errorf("a renewed lease taken over at %d", got[0])
	}
}

// stale returns the partitions plan would take over as stale, with the
// revision it would expect.
func stale(m *Manager) map[int]uint64 {
	out := map[int]uint64{}
	for _, a := range m.plan() {
		if a.stale {
			out[a.p] = a.rev
		}
	}
	return out
}

// TestReplacedWatchIsIgnored: once a watch is replaced, what it still
// delivers (older than what its successor gave) changes nothing.
func TestReplacedWatchIsIgnored(t *testing.T) {
	m := planner("b", 4)
	m.mu.watchGen = 2
	m.applyFrom(2, entry{key: leaseKey(0), val: []byte(`{"node":"b","epoch":9}`), rev: 50, op: jetstream.KeyValuePut})
	if m.applyFrom(1, entry{key: leaseKey(0), val: []byte(`{"node":"a","epoch":8}`), rev: 40, op: jetstream.KeyValuePut}) {
		t.Error("an entry of the replaced watch reported a change")
	}
	if m.applyFrom(1, entry{key: prefixNode + "a", val: []byte(`{}`), rev: 41, op: jetstream.KeyValuePut}) {
		t.Error("a node key of the replaced watch reported a change")
	}
	if c := m.mu.leases[0]; c.rev != 50 || c.lease.Node != "b" {
		t.Errorf("lease 0 after a late entry of the replaced watch: %+v", c)
	}
	if _, ok := m.mu.nodes["a"]; ok {
		t.Error("a node seen only by the replaced watch is alive")
	}
}

// TestGraceNeedsNoPause: a lease past its deadline, its renewal failing,
// is served on the election grace only while the process retries and ran
// without a pause since the deadline. A retry sent as a stopped process
// resumes (the renewer's ticker firing first) proves nothing of the time
// it was stopped: the watchdog saw the gap, and the lease is expired.
func TestGraceNeedsNoPause(t *testing.T) {
	m := planner("a", 1)
	m.log = slog.New(slog.DiscardHandler)
	m.cfg.ElectionGrace = m.cfg.TTL / 2
	m.cfg.Margin = m.cfg.TTL / 5
	now := time.Now()
	h := &held{lease: Lease{Partition: 0, Node: "a", Epoch: 3}, until: now.Add(-time.Second), tried: now, failing: true}
	m.mu.dogAt = now
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.validLocked(h, now) {
		t.Fatal("a lease a running process retries is not served on the grace")
	}
	h.failing = false
	if m.validLocked(h, now) {
		t.Error("a lease past its deadline whose renewal did not fail is served")
	}
	h.failing = true
	h.tried = now.Add(-m.graceFresh() - time.Millisecond)
	if m.validLocked(h, now) {
		t.Error("a lease whose last retry is stale is served on the grace")
	}
	h.tried = now
	m.mu.pauseEnded = now.Add(-time.Millisecond) // after the deadline
	if m.validLocked(h, now) {
		t.Error("a lease whose process paused past its deadline is served on the grace")
	}
	m.mu.pauseEnded = h.until.Add(-time.Millisecond)
	m.mu.dogAt = now.Add(-m.graceFresh() - time.Millisecond)
	if m.validLocked(h, now) {
		t.Error("a lease is served on the grace while the watchdog has not run for graceFresh")
	}
	m.mu.dogAt = now
	if m.validLocked(h, h.until.Add(m.cfg.ElectionGrace+time.Millisecond)) {
		t.Error("a lease is served past its election grace")
	}
}

// TestHandoffDueBetweenRounds: a partition this node holds that the
// assignment gives to a node that joined is found by the check between
// rounds once that node was seen alive for a renewal period, not left to
// the next round (up to a renewal period later: a restarted node's
// partitions came over 3 to 3.9 s after it joined, in waves, one per
// holder); before that period it is not handed off.
func TestHandoffDueBetweenRounds(t *testing.T) {
	const parts = 12
	m := planner("a", parts)
	m.apply(entry{key: prefixNode + "a", val: []byte(`{}`), rev: 1, op: jetstream.KeyValuePut})
	for p := range parts {
		m.mu.held[p] = &held{lease: Lease{Partition: p, Node: "a", Epoch: 1}, rev: uint64(p + 2), until: time.Now().Add(time.Hour)}
	}
	if m.dueBetweenRounds() {
		t.Fatal("due with every partition held as assigned")
	}
	m.apply(entry{key: prefixNode + "b", val: []byte(`{}`), rev: 20, op: jetstream.KeyValuePut})
	if m.dueBetweenRounds() {
		t.Fatal("a handoff due to b, seen alive just now")
	}
	m.mu.Lock()
	m.mu.nodes["b"] = time.Now().Add(-m.cfg.RenewEvery)
	m.mu.Unlock()
	if !m.dueBetweenRounds() {
		t.Fatal("no handoff due to b, seen alive for a renewal period: left to the next round")
	}
}

// nodeKey is the value of node's key as a process started at started
// writes it.
func nodeKey(started string) []byte {
	b, _ := json.Marshal(nodeValue{Started: started, Reads: FormatBase})
	return b
}

// TestRestartOfAStableNodeIsDueAtOnce: a node that restarts under its
// name is handed its partitions at once when its last process was seen
// heartbeating (whether its key was deleted by a stop, expired after a
// crash, or announces another start: a kill and a restart before it
// expired) or stopped in order (deleted its key) however short it lived;
// a node that then flaps (its next process dies before it heartbeats
// twice, without a stop) waits a renewal period again, as a stranger
// does.
func TestRestartOfAStableNodeIsDueAtOnce(t *testing.T) {
	const parts = 12
	ends := map[string]jetstream.KeyValueOp{"stopped": jetstream.KeyValueDelete, "expired": jetstream.KeyValuePurge, "replaced": 0}
	for name, op := range ends {
		t.Run(name, func(t *testing.T) {
			m := planner("a", parts)
			m.apply(entry{key: prefixNode + "a", val: nodeKey("t0"), rev: 1, op: jetstream.KeyValuePut})
			for p := range parts {
				m.mu.held[p] = &held{lease: Lease{Partition: p, Node: "a", Epoch: 1}, rev: uint64(p + 2), until: time.Now().Add(time.Hour)}
			}
			rev := uint64(20)
			// end ends b's process by op (0: none, the next start replaces
			// its key).
			end := func(op jetstream.KeyValueOp) {
				if op != 0 {
					rev++
					m.apply(entry{key: prefixNode + "b", rev: rev, op: op})
				}
			}
			start := func(started string) {
				rev++
				m.apply(entry{key: prefixNode + "b", val: nodeKey(started), rev: rev, op: jetstream.KeyValuePut})
			}
			start("t1")
			if m.dueBetweenRounds() {
				t.Fatal("a handoff due to b, a stranger seen alive just now")
			}
			// b heartbeats a renewal period after it was first seen.
			m.mu.Lock()
			m.mu.nodes["b"] = time.Now().Add(-m.cfg.RenewEvery)
			m.mu.Unlock()
			start("t1")
			if !m.dueBetweenRounds() {
				t.Fatal("no handoff due to b, seen alive for a renewal period")
			}
			end(op)
			start("t2")
			if !m.dueBetweenRounds() {
				t.Fatal("no handoff due to b's restart after it heartbeat: it waits a renewal period like a stranger")
			}
			// That process dies at once, without a stop, and b starts
			// again: a flapping node.
			crash := op
			if crash == jetstream.KeyValueDelete {
				crash = jetstream.KeyValuePurge
			}
			end(crash)
			start("t3")
			if m.dueBetweenRounds() {
				t.Fatal("a handoff due at once to b's third start, right after its second died: a flapping node drags partitions")
			}
			// A stop in order, however soon, is no flap.
			end(jetstream.KeyValueDelete)
			start("t4")
			if !m.dueBetweenRounds() {
				t.Fatal("no handoff due to b's restart after it stopped in order")
			}
		})
	}
}
