package eventlog_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// ownedNode is one node's Log and Follower of an owned-views log, with a
// count of the events its view applied.
type ownedNode struct {
	lg      *eventlog.Log
	f       *eventlog.Follower
	applied atomic.Int64
}

func startOwned(t *testing.T, lg *eventlog.Log) *ownedNode {
	t.Helper()
	n := &ownedNode{lg: lg}
	p := counter(1)
	inner := p.Apply
	p.Apply = func(b *eventlog.Batch, e eventlog.Event) error {
		n.applied.Add(1)
		return inner(b, e)
	}
	n.f = newFollower(t, lg, p)
	eventlogtest.RunFollower(t, n.f)
	return n
}

// foldOf is the counter view of the events of agents in parts (of p).
func foldOf(t *testing.T, lg *eventlog.Log, p int, parts ...int) map[string]string {
	t.Helper()
	var evs []eventlog.Event
	for after := eventlog.Seq(0); ; {
		page, err := lg.Read(t.Context(), eventlog.Filter{}, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			if slices.Contains(parts, eventlog.PartitionOf(e.Agent, p)) {
				evs = append(evs, e)
			}
		}
		after = page[len(page)-1].Seq
	}
	return fold(evs)
}

// Two nodes of a log with K=2 shards over P=4 partitions, each following
// different partitions: each view holds, and applies, only its own
// partitions' events; read-your-writes holds, and waiting for a sequence
// of a partition a node does not follow returns. After a handover the new
// owner catches the partition up and its view is right; the old owner,
// following it again, resumes from its own cursor.
func TestOwnedViews(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	cfg := eventlog.Config{Shards: 2, Partitions: 4, OwnedViews: true}
	a := startOwned(t, eventlogtest.OpenOn(t, s, cfg))
	b := startOwned(t, eventlogtest.OpenOn(t, s, cfg))
	agents := agentsOverShards(t, 16, 4, 2)
	byPart := map[int][]string{}
	for _, id := range agents {
		p := eventlog.PartitionOf(id, 4)
		byPart[p] = append(byPart[p], id)
	}
	if len(byPart) != 4 {
		t.Fatalf("agents cover partitions %v, want all 4", byPart)
	}
	appendAll := func(round int, ids []string) {
		t.Helper()
		for _, id := range ids {
			if _, err := a.lg.Append(ctx, eventlog.Event{Agent: id, Type: "tick", Data: json.RawMessage(strconv.Itoa(round))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendAll(0, agents)
	for _, p := range []int{0, 1} {
		if err := a.lg.FollowPartition(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []int{2, 3} {
		if err := b.lg.FollowPartition(p); err != nil {
			t.Fatal(err)
		}
	}
	appendAll(1, agents)
	check := func(n *ownedNode, name string, parts ...int) {
		t.Helper()
		if err := n.f.WaitFor(ctx, eventlog.SeqEnds); err != nil {
			t.Fatal(err)
		}
		if got, want := dump(t, n.lg, "counter"), foldOf(t, n.lg, 4, parts...); !equalMaps(got, want) {
			t.Fatalf("node %s following %v: view %v, want %v", name, parts, got, want)
		}
	}
	check(a, "a", 0, 1)
	check(b, "b", 2, 3)
	own := func(parts ...int) int64 {
		n := 0
		for _, p := range parts {
			n += 2 * len(byPart[p])
		}
		return int64(n)
	}
	if got, want := a.applied.Load(), own(0, 1); got != want {
		t.Errorf("node a applied %d events, want its partitions' %d", got, want)
	}
	if got, want := b.applied.Load(), own(2, 3); got != want {
		t.Errorf("node b applied %d events, want its partitions' %d", got, want)
	}
	if got := a.lg.FollowedPartitions(); !slices.Equal(got, []int{0, 1}) {
		t.Errorf("a follows %v, want [0 1]", got)
	}

	// Read-your-writes on the owner; a wait for another node's partition
	// returns once this node's partitions hold everything before it.
	for p, ids := range byPart {
		owner, other := a, b
		if p >= 2 {
			owner, other = b, a
		}
		seq, err := owner.lg.Append(ctx, eventlog.Event{Agent: ids[0], Type: "tick", Data: json.RawMessage(`9`)})
		if err != nil {
			t.Fatal(err)
		}
		if err := owner.f.WaitFor(ctx, seq); err != nil {
			t.Fatal(err)
		}
		if got, want := dump(t, owner.lg, "counter")["n/"+ids[0]], "3"; got != want {
			t.Fatalf("after WaitFor(%d) on its owner, %s counts %q, want %s", seq, ids[0], got, want)
		}
		if err := other.f.WaitFor(ctx, seq); err != nil {
			t.Fatalf("WaitFor(%d) of partition %d on a node not following it: %v", seq, p, err)
		}
	}

	// Handover of partition 1 from a to b: b catches it up from nothing.
	if err := a.lg.UnfollowPartition(1); err != nil {
		t.Fatal(err)
	}
	if err := b.lg.FollowPartition(1); err != nil {
		t.Fatal(err)
	}
	check(b, "b", 1, 2, 3)
	appendAll(2, byPart[1])
	check(b, "b", 1, 2, 3)
	// a's rows of partition 1 stay as they were; following it again, a
	// resumes from its cursor: it applies only what was appended since.
	before := a.applied.Load()
	if err := a.lg.FollowPartition(1); err != nil {
		t.Fatal(err)
	}
	check(a, "a", 0, 1)
	if got, want := a.applied.Load()-before, int64(len(byPart[1])); got != want {
		t.Errorf("a following partition 1 again applied %d events, want the %d appended since it let it go", got, want)
	}
}

// A view kept with every partition and opened with owned views starts
// each partition at its shard's cursor (nothing applied twice); opened
// again without owned views, it is rebuilt whole.
func TestOwnedViewsSwitch(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	dir := t.TempDir()
	all := eventlog.Config{Shards: 2, Partitions: 4, Dir: dir}
	lg := eventlogtest.OpenOn(t, s, all)
	agents := agentsOverShards(t, 16, 4, 2)
	for _, id := range agents {
		if _, err := lg.Append(ctx, eventlog.Event{Agent: id, Type: "tick", Data: json.RawMessage(`1`)}); err != nil {
			t.Fatal(err)
		}
	}
	run := func(lg *eventlog.Log) (*ownedNode, func()) {
		n := &ownedNode{lg: lg}
		p := counter(1)
		inner := p.Apply
		p.Apply = func(b *eventlog.Batch, e eventlog.Event) error {
			n.applied.Add(1)
			return inner(b, e)
		}
		n.f = newFollower(t, lg, p)
		fctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- n.f.Run(fctx) }()
		return n, func() {
			stop()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			lg.Close()
		}
	}
	n, stop := run(lg)
	if err := n.f.WaitFor(ctx, eventlog.SeqEnds); err != nil {
		t.Fatal(err)
	}
	stop()

	owned := all
	owned.OwnedViews = true
	n, stop = run(eventlogtest.OpenOn(t, s, owned))
	for p := range 4 {
		if err := n.lg.FollowPartition(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.f.WaitFor(ctx, eventlog.SeqEnds); err != nil {
		t.Fatal(err)
	}
	if got := n.applied.Load(); got != 0 {
		t.Errorf("opened with owned views, the view applied %d events again, want 0", got)
	}
	if got, want := dump(t, n.lg, "counter"), foldOf(t, n.lg, 4, 0, 1, 2, 3); !equalMaps(got, want) {
		t.Fatalf("view %v, want %v", got, want)
	}
	// Only partition 0 from now on: the others fall behind.
	for p := 1; p < 4; p++ {
		if err := n.lg.UnfollowPartition(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range agents {
		if _, err := n.lg.Append(ctx, eventlog.Event{Agent: id, Type: "tick", Data: json.RawMessage(`2`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.f.WaitFor(ctx, eventlog.SeqEnds); err != nil {
		t.Fatal(err)
	}
	stop()

	n, stop = run(eventlogtest.OpenOn(t, s, all))
	defer stop()
	if err := n.f.WaitFor(ctx, eventlog.SeqEnds); err != nil {
		t.Fatal(err)
	}
	if got, want := dump(t, n.lg, "counter"), foldOf(t, n.lg, 4, 0, 1, 2, 3); !equalMaps(got, want) {
		t.Fatalf("opened without owned views again: view %v, want %v", got, want)
	}
	if got, want := n.applied.Load(), int64(2*len(agents)); got != want {
		t.Errorf("opened without owned views again, the view applied %d events, want a rebuild's %d", got, want)
	}
}

func TestOwnedViewsConfig(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	if _, err := eventlog.Open(t.Context(), eventlog.Config{Conn: eventlogtest.Connect(t, s), OwnedViews: true}); err == nil {
		t.Fatal("owned views of an unsharded log opened")
	}
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{Shards: 2, Partitions: 4, OwnedViews: true})
	for _, p := range []int{-1, 4} {
		if err := lg.FollowPartition(p); err == nil {
			t.Errorf("FollowPartition(%d) of 4 partitions: no error", p)
		}
	}
	// Follows are counted: a release that ends after the next acquisition
	// began leaves the partition followed.
	for _, step := range []struct {
		follow bool
		want   []int
	}{{true, []int{1}}, {true, []int{1}}, {false, []int{1}}, {false, []int{}}, {false, []int{}}} {
		var err error
		if step.follow {
			err = lg.FollowPartition(1)
		} else {
			err = lg.UnfollowPartition(1)
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := lg.FollowedPartitions(); !slices.Equal(got, step.want) {
			t.Fatalf("followed %v, want %v", got, step.want)
		}
	}
	unsharded := eventlogtest.OpenOn(t, s, eventlog.Config{EventsStream: "E2", ChunksStream: "C2", Prefix: "other"})
	if err := unsharded.FollowPartition(0); err == nil {
		t.Error("FollowPartition of a log without owned views: no error")
	}
}

// A wait for the followed partitions' last events (WaitFor(SeqEnds), as a
// node's recovery of a partition it took waits) that began while two
// partitions of a shard were followed returns once the views applied the
// one still followed, when the other was released meanwhile with a last
// event past it: that event never moves the cursor of the partitions
// followed now (the wait hung before, and the node never recovered the
// fibers of the partition it had taken).
func TestOwnedViewsWaitAcrossRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{Shards: 2, Partitions: 4, OwnedViews: true})
	// Partitions 0 and 2 are both in shard 0: kept holds an agent of 0,
	// released one of 2.
	var kept, released string
	for i := 0; kept == "" || released == ""; i++ {
		id := "agent" + strconv.Itoa(i)
		switch eventlog.PartitionOf(id, 4) {
		case 0:
			kept = cmp.Or(kept, id)
		case 2:
			released = cmp.Or(released, id)
		}
	}
	for _, p := range []int{0, 2} {
		if err := lg.FollowPartition(p); err != nil {
			t.Fatal(err)
		}
	}
	parts, gen := eventlog.FollowedSince(lg)
	for _, id := range []string{kept, released} {
		if _, err := lg.Append(ctx, eventlog.Event{Agent: id, Type: "tick", Data: json.RawMessage(`1`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := lg.UnfollowPartition(2); err != nil {
		t.Fatal(err)
	}
	f := newFollower(t, lg, counter(1))
	eventlogtest.RunFollower(t, f)
	if err := eventlog.WaitOwnedSince(ctx, f, eventlog.SeqEnds, parts, gen); err != nil {
		t.Fatalf("wait for the followed partitions' last events, begun while partition 2 was followed: %v", err)
	}
	if got := dump(t, lg, "counter"); len(got) == 0 {
		t.Fatalf("the view of partition 0 is empty after the wait")
	}
}

// A wait for one partition's events (WaitPartition: what a new owner's
// recovery of that partition waits for) returns once that partition is
// caught up, while another partition, in another shard, newly followed,
// is still catching up from its first event: the recovery of one
// partition does not wait for another's catch-up. WaitFor of the log's
// end (SeqEnds), which recovery waited for before, would wait for both.
func TestOwnedViewsWaitPartition(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{Shards: 2, Partitions: 4, OwnedViews: true})
	// Partition 0 is in shard 0, partition 1 in shard 1.
	var mine, other string
	for i := 0; mine == "" || other == ""; i++ {
		id := "agent" + strconv.Itoa(i)
		switch eventlog.PartitionOf(id, 4) {
		case 0:
			mine = cmp.Or(mine, id)
		case 1:
			other = cmp.Or(other, id)
		}
	}
	// The view's Apply of partition 1's events blocks until gate is
	// closed: partition 1's catch-up stays unfinished meanwhile.
	gate, entered := make(chan struct{}), make(chan struct{}, 1)
	p := counter(1)
	inner := p.Apply
	p.Apply = func(b *eventlog.Batch, e eventlog.Event) error {
		if eventlog.PartitionOf(e.Agent, 4) == 1 {
			select {
			case entered <- struct{}{}:
			default:
			}
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return inner(b, e)
	}
	if err := lg.FollowPartition(0); err != nil {
		t.Fatal(err)
	}
	f := newFollower(t, lg, p)
	eventlogtest.RunFollower(t, f)
	if _, err := lg.Append(ctx, eventlog.Event{Agent: mine, Type: "tick", Data: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	if err := f.WaitPartition(ctx, 0); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := lg.Append(ctx, eventlog.Event{Agent: other, Type: "tick", Data: json.RawMessage(`1`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := lg.FollowPartition(1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered: // partition 1's catch-up is under way, and held
	case <-ctx.Done():
		t.Fatal("partition 1's catch-up never applied its first event")
	}
	if err := f.WaitPartition(ctx, 0); err != nil {
		t.Fatalf("wait for partition 0 while partition 1 catches up: %v", err)
	}
	if got, want := dump(t, lg, "counter")["n/"+other], ""; got != want {
		t.Fatalf("partition 1's events were applied before its catch-up was let go: n/%s = %q", other, got)
	}
	close(gate)
	if err := f.WaitPartition(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got, want := dump(t, lg, "counter"), foldOf(t, lg, 4, 0, 1); !maps.Equal(got, want) {
		t.Fatalf("view after both partitions caught up:\n got %v\nwant %v", got, want)
	}
	if err := f.WaitPartition(ctx, 4); !errors.Is(err, eventlog.ErrInvalid) {
		t.Fatalf("WaitPartition(4) of 4 partitions: %v, want ErrInvalid", err)
	}
}
