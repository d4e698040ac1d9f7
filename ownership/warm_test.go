package ownership

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog/eventlogtest"
	dto "github.com/prometheus/client_model/go"
)

// preparing records a node's Prepare calls: which partitions are being
// prepared, and lets the test say when each is warm.
type preparing struct {
	mu    sync.Mutex
	warm  map[int]func()
	ended map[int]bool // Prepare returned
	live  map[int]context.Context
}

func newPreparing() *preparing {
	return &preparing{warm: map[int]func(){}, ended: map[int]bool{}, live: map[int]context.Context{}}
}

func (pr *preparing) prepare(ctx context.Context, p int, warm func()) {
	pr.mu.Lock()
	pr.warm[p], pr.live[p] = warm, ctx
	delete(pr.ended, p)
	pr.mu.Unlock()
	<-ctx.Done()
	pr.mu.Lock()
	pr.ended[p] = true
	delete(pr.live, p)
	pr.mu.Unlock()
}

// running returns the partitions whose Prepare runs, in order.
func (pr *preparing) running() []int {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	var out []int
	for p := range pr.live {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

func (pr *preparing) makeWarm(p int) {
	pr.mu.Lock()
	warm := pr.warm[p]
	pr.mu.Unlock()
	warm()
}

// servedBy returns the partitions node serves, in order.
func (s *serving) servedBy(node string) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for p, n := range s.by {
		if n == node {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// TestWarmHandoff: a node that joins prepares the partitions assigned to
// it while their holder keeps serving them, and is handed each one only
// once its Prepare called warm. Its Prepare goes on while it holds the
// partition (an acquisition changes nothing it started), and ends when
// the node stops.
func TestWarmHandoff(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	sv := newServing(t)
	cfg := func(name string) Config {
		return Config{Node: name, Partitions: 16, TTL: 60 * time.Second, RenewEvery: 200 * time.Millisecond,
			Serve: sv.serve(name)}
	}
	a := startNode(t, s, cfg("a"))
	pr := newPreparing()
	bc := cfg("b")
	bc.Prepare = pr.prepare
	b := startNode(t, s, bc)
	eventually(t, "b prepares its share of 8 partitions", func() bool { return len(pr.running()) == 8 })
	share := pr.running()
	if got := sv.servedBy("b"); len(got) != 0 {
		t.Fatalf("b serves %v before any is warm", got)
	}
	// Half warm: a hands those over, and keeps the rest, due to b as long.
	for _, p := range share[:4] {
		pr.makeWarm(p)
	}
	eventually(t, "b serves the 4 warm partitions", func() bool { return slices.Equal(sv.servedBy("b"), share[:4]) })
	eventually(t, "a's rounds plan after b's handoff", func() bool { return a.m.OwnedCount() == 12 })
	time.Sleep(5 * 200 * time.Millisecond) // a few of a's rounds: not a timing assertion, the next check holds at any time
	if got := sv.servedBy("b"); !slices.Equal(got, share[:4]) {
		t.Fatalf("b serves %v with only %v warm", got, share[:4])
	}
	if got := pr.running(); !slices.Equal(got, share) {
		t.Errorf("Prepare runs for %v once b holds half, want %v still", got, share)
	}
	for _, p := range share[4:] {
		pr.makeWarm(p)
	}
	eventually(t, "b serves its 8", func() bool { return slices.Equal(sv.servedBy("b"), share) })
	if got := handoffCount(a.m, handoffWarm); got != 8 {
		t.Errorf("a counted %v warm handoffs, want 8", got)
	}
	b.stop(t)
	eventually(t, "a serves all 16 again", func() bool { return len(sv.servedBy("a")) == 16 })
	if got := pr.running(); len(got) != 0 {
		t.Errorf("Prepare still runs for %v after b stopped", got)
	}
}

// TestWarmWaitBound: a receiver whose views never catch up is handed its
// partitions after WarmWait, not never.
func TestWarmWaitBound(t *testing.T) {
	a, _, sv := joinSecond(t, 500*time.Millisecond, newPreparing().prepare)
	eventually(t, "b serves its 4 partitions, none warm", func() bool { return len(sv.servedBy("b")) == 4 })
	if got := handoffCount(a.m, handoffWaited); got != 4 {
		t.Errorf("a counted %v handoffs after the warm wait, want 4", got)
	}
}

// TestHandoffToANodeThatAnnouncesNothing: a node without Prepare (as an
// earlier release) is handed its partitions at once, as before.
func TestHandoffToANodeThatAnnouncesNothing(t *testing.T) {
	a, _, sv := joinSecond(t, time.Hour, nil)
	eventually(t, "b serves its 4 partitions", func() bool { return len(sv.servedBy("b")) == 4 })
	if got := handoffCount(a.m, handoffUnannounced); got != 4 {
		t.Errorf("a counted %v handoffs to a node that announces nothing, want 4", got)
	}
}

// joinSecond starts node a holding 8 partitions, then node b with
// prepare, both with warmWait: b is due 4 of them.
func joinSecond(t *testing.T, warmWait time.Duration, prepare func(context.Context, int, func())) (a, b *node, sv *serving) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	sv = newServing(t)
	cfg := func(name string) Config {
		return Config{Node: name, Partitions: 8, TTL: 60 * time.Second, RenewEvery: 200 * time.Millisecond,
			WarmWait: warmWait, Serve: sv.serve(name)}
	}
	a = startNode(t, s, cfg("a"))
	bc := cfg("b")
	bc.Prepare = prepare
	b = startNode(t, s, bc)
	return a, b, sv
}

// handoffCount returns m's forever_ownership_handoffs_total of receiver.
func handoffCount(m *Manager, receiver string) float64 {
	var out dto.Metric
	_ = m.met.handoffs.WithLabelValues(receiver).Write(&out)
	return out.GetCounter().GetValue()
}
