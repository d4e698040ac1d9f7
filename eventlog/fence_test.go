package eventlog_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/nats-io/nats.go"
)

// grants is an Owner whose tokens a test sets per agent.
type grants struct {
	mu sync.Mutex
	m  map[string]eventlog.Token
}

func (g *grants) Token(agent string) (eventlog.Token, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t, ok := g.m[agent]
	return t, ok
}

func (g *grants) set(agent string, t eventlog.Token) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]eventlog.Token{}
	}
	g.m[agent] = t
}

func (g *grants) drop(agent string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.m, agent)
}

// node is one fenced writer process: its own connection and Log.
type node struct {
	lg     *eventlog.Log
	owner  *grants
	fenced chan string
}

func openNodes(t *testing.T, n int) []*node {
	t.Helper()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	out := make([]*node, n)
	for i := range out {
		nd := &node{owner: &grants{}, fenced: make(chan string, 16)}
		nd.lg = eventlogtest.OpenOn(t, s, eventlog.Config{
			Owner:    nd.owner,
			OnFenced: func(agent string, _ error) { nd.fenced <- agent },
		})
		out[i] = nd
	}
	return out
}

func appendNote(ctx context.Context, lg *eventlog.Log, agent string, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	return lg.Append(ctx, eventlog.Event{Agent: agent, Type: "note.added", Data: []byte(`{}`)}, opts...)
}

// TestFenceStaleOwner: once a newer owner wrote an agent, the old owner's
// next append fails with ErrFenced, is reported once, and never lands; the
// log's writer headers show the epochs of the subject never going back.
func TestFenceStaleOwner(t *testing.T) {
	ctx := t.Context()
	nodes := openNodes(t, 2)
	a, b := nodes[0], nodes[1]
	a.owner.set("x", eventlog.Token{Node: "a", Epoch: 1})
	for range 3 {
		if _, err := appendNote(ctx, a.lg, "x"); err != nil {
			t.Fatalf("owner a: %v", err)
		}
	}
	// b takes x over (a's lease expired while a was stopped, say).
	b.owner.set("x", eventlog.Token{Node: "b", Epoch: 7})
	if _, err := appendNote(ctx, b.lg, "x"); err != nil {
		t.Fatalf("new owner b: %v", err)
	}
	// a still believes it owns x.
	_, err := appendNote(ctx, a.lg, "x")
	if !errors.Is(err, eventlog.ErrFenced) {
		t.Fatalf("stale append: got %v, want ErrFenced", err)
	}
	if errors.Is(err, eventlog.ErrConflict) {
		t.Errorf("a fencing error must not look like a compare-and-set conflict: %v", err)
	}
	if got := <-a.fenced; got != "x" {
		t.Errorf("OnFenced agent = %q, want x", got)
	}
	if _, err := appendNote(ctx, a.lg, "x"); !errors.Is(err, eventlog.ErrFenced) {
		t.Fatalf("second stale append: got %v, want ErrFenced", err)
	}
	if _, err := appendNote(ctx, b.lg, "x"); err != nil {
		t.Fatalf("owner b after a was fenced: %v", err)
	}

	evs, err := b.lg.Read(ctx, eventlog.Filter{Agent: "x"}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var writers []eventlog.Token
	for _, e := range evs {
		writers = append(writers, e.Writer)
	}
	want := []eventlog.Token{{"a", 1}, {"a", 1}, {"a", 1}, {"b", 7}, {"b", 7}}
	if len(writers) != len(want) {
		t.Fatalf("writers = %v, want %v", writers, want)
	}
	for i := range want {
		if writers[i] != want[i] {
			t.Fatalf("writers = %v, want %v", writers, want)
		}
	}
}

// TestFenceNotOwner: without a token nothing is sent.
func TestFenceNotOwner(t *testing.T) {
	ctx := t.Context()
	a := openNodes(t, 1)[0]
	if _, err := appendNote(ctx, a.lg, "x"); !errors.Is(err, eventlog.ErrNotOwner) {
		t.Fatalf("got %v, want ErrNotOwner", err)
	}
	a.owner.set("x", eventlog.Token{Node: "a", Epoch: 1})
	if _, err := appendNote(ctx, a.lg, "x"); err != nil {
		t.Fatal(err)
	}
	a.owner.drop("x")
	if _, err := appendNote(ctx, a.lg, "x"); !errors.Is(err, eventlog.ErrNotOwner) {
		t.Fatalf("after the lease went: got %v, want ErrNotOwner", err)
	}
	if last, _ := a.lg.LastSeq(ctx, eventlog.Filter{Agent: "x"}); last != 1 {
		t.Errorf("last seq = %d, want 1 (only the owned append stored)", last)
	}
}

// TestFenceNewEpochResumes: the same process under a new token reads the
// subject again, so it writes after whatever the interregnum left.
func TestFenceNewEpochResumes(t *testing.T) {
	ctx := t.Context()
	nodes := openNodes(t, 2)
	a, b := nodes[0], nodes[1]
	a.owner.set("x", eventlog.Token{Node: "a", Epoch: 1})
	b.owner.set("x", eventlog.Token{Node: "b", Epoch: 2})
	if _, err := appendNote(ctx, a.lg, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := appendNote(ctx, b.lg, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := appendNote(ctx, a.lg, "x"); !errors.Is(err, eventlog.ErrFenced) {
		t.Fatalf("got %v, want ErrFenced", err)
	}
	a.owner.set("x", eventlog.Token{Node: "a", Epoch: 3})
	if _, err := appendNote(ctx, a.lg, "x"); err != nil {
		t.Fatalf("under the new epoch: %v", err)
	}
}

// TestFenceCompareAndSet: a caller's ExpectSeq is still a compare-and-set
// on the agent's subject, decided against the fence.
func TestFenceCompareAndSet(t *testing.T) {
	ctx := t.Context()
	a := openNodes(t, 1)[0]
	a.owner.set("x", eventlog.Token{Node: "a", Epoch: 1})
	seq, err := appendNote(ctx, a.lg, "x", eventlog.ExpectSeq(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := appendNote(ctx, a.lg, "x", eventlog.ExpectSeq(seq-1)); !errors.Is(err, eventlog.ErrConflict) || errors.Is(err, eventlog.ErrFenced) {
		t.Fatalf("stale expectation: got %v, want ErrConflict", err)
	}
	if _, err := appendNote(ctx, a.lg, "x", eventlog.ExpectSeq(seq)); err != nil {
		t.Fatalf("matching expectation: %v", err)
	}
}

// TestFenceChunks: a batch that mixes a stream another writer took over
// with other agents' chunks fails only the stale stream.
func TestFenceChunks(t *testing.T) {
	ctx := t.Context()
	nodes := openNodes(t, 2)
	a, b := nodes[0], nodes[1]
	a.owner.set("x", eventlog.Token{Node: "a", Epoch: 1})
	a.owner.set("y", eventlog.Token{Node: "a", Epoch: 1})
	bctx, stop := context.WithCancel(ctx)
	defer stop()
	ab := a.lg.NewBatcher(eventlog.BatcherConfig{})
	done := make(chan error, 1)
	go func() { done <- ab.Run(bctx) }()
	defer func() { stop(); <-done }()

	chunk := func(agent, stream, id string) eventlog.Event {
		return eventlog.Event{Agent: agent, Stream: stream, Type: "chunk", ID: stream + "/" + id, Data: []byte(`{"type":"text-delta"}`)}
	}
	add := func(e eventlog.Event) *eventlog.Pending {
		t.Helper()
		p, err := ab.Add(ctx, e)
		if err != nil {
			t.Fatalf("add %s: %v", e.ID, err)
		}
		return p
	}
	for _, p := range []*eventlog.Pending{add(chunk("x", "s1", "0")), add(chunk("y", "s2", "0"))} {
		if _, err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// b takes x over and continues its stream.
	b.owner.set("x", eventlog.Token{Node: "b", Epoch: 2})
	if _, err := b.lg.Append(ctx, chunk("x", "s1", "1")); err != nil {
		t.Fatalf("new owner's chunk: %v", err)
	}
	stale, fresh := add(chunk("x", "s1", "1b")), add(chunk("y", "s2", "1"))
	if _, err := stale.Wait(ctx); !errors.Is(err, eventlog.ErrFenced) {
		t.Errorf("stale stream's chunk: got %v, want ErrFenced", err)
	}
	if _, err := fresh.Wait(ctx); err != nil {
		t.Errorf("other agent's chunk in the same batch: %v", err)
	}
	evs, err := b.lg.Read(ctx, eventlog.Filter{Agent: "x", Stream: "s1"}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range evs {
		ids = append(ids, e.ID)
	}
	if len(ids) != 2 || ids[0] != "s1/0" || ids[1] != "s1/1" {
		t.Errorf("stream s1 = %v, want [s1/0 s1/1]: the stale chunk must not land", ids)
	}
}

func TestCheckWriters(t *testing.T) {
	ev := func(seq uint64, node string, epoch uint64) eventlog.Event {
		return eventlog.Event{Seq: eventlog.Seq(seq), Type: "t", Writer: eventlog.Token{Node: node, Epoch: epoch}}
	}
	for _, tc := range []struct {
		name string
		evs  []eventlog.Event
		ok   bool
	}{
		{"one owner", []eventlog.Event{ev(1, "a", 1), ev(2, "a", 1)}, true},
		{"handover", []eventlog.Event{ev(1, "a", 1), ev(2, "b", 5), ev(3, "a", 9)}, true},
		{"unfenced events skipped", []eventlog.Event{ev(1, "", 0), ev(2, "a", 1), ev(3, "", 0)}, true},
		{"stale owner after takeover", []eventlog.Event{ev(1, "a", 1), ev(2, "b", 5), ev(3, "a", 1)}, false},
		{"two nodes one epoch", []eventlog.Event{ev(1, "a", 3), ev(2, "b", 3)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := eventlog.CheckWriters(tc.evs); (err == nil) != tc.ok {
				t.Errorf("CheckWriters = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// TestFenceOwnLostAck: a write of this owner whose acknowledgement was lost
// (stored, but the fence never learned its sequence) does not fence the
// owner out: its next append finds its own token on the subject's last
// message and is sent again after it. Another process writing with the same
// token stands in for the lost acknowledgement.
func TestFenceOwnLostAck(t *testing.T) {
	ctx := t.Context()
	nodes := openNodes(t, 2)
	a, ghost := nodes[0], nodes[1]
	tok := eventlog.Token{Node: "a", Epoch: 1}
	a.owner.set("x", tok)
	if _, err := appendNote(ctx, a.lg, "x"); err != nil {
		t.Fatal(err)
	}
	ghost.owner.set("x", tok)
	lost, err := appendNote(ctx, ghost.lg, "x")
	if err != nil {
		t.Fatal(err)
	}
	seq, err := appendNote(ctx, a.lg, "x")
	if err != nil {
		t.Fatalf("append after our own lost write: %v", err)
	}
	if seq <= lost {
		t.Fatalf("appended at %d, before the lost write at %d", seq, lost)
	}
	select {
	case agent := <-a.fenced:
		t.Fatalf("OnFenced(%s) for a write of our own", agent)
	default:
	}
	// A writer with another token still fences a out.
	b := eventlog.Token{Node: "b", Epoch: 2}
	ghost.owner.set("x", b)
	if _, err := appendNote(ctx, ghost.lg, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := appendNote(ctx, a.lg, "x"); !errors.Is(err, eventlog.ErrFenced) {
		t.Fatalf("after another writer: got %v, want ErrFenced", err)
	}
}

// TestFenceAsyncBatches: with AsyncBatches (agentd under --sync interval), a
// stale owner's batch and chunks are still fenced whole: none of their
// events lands after the newer owner's write.
func TestFenceAsyncBatches(t *testing.T) {
	ctx := t.Context()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	open := func() *node {
		nd := &node{owner: &grants{}, fenced: make(chan string, 16)}
		nd.lg = eventlogtest.OpenOn(t, s, eventlog.Config{
			Owner:        nd.owner,
			OnFenced:     func(agent string, _ error) { nd.fenced <- agent },
			AsyncBatches: true,
		})
		return nd
	}
	a, b := open(), open()
	a.owner.set("x", eventlog.Token{Node: "a", Epoch: 1})
	if _, err := appendNote(ctx, a.lg, "x"); err != nil {
		t.Fatal(err)
	}
	ba := a.lg.NewBatcher(eventlog.BatcherConfig{})
	bctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ba.Run(bctx) }()
	defer func() { stop(); <-done }()
	chunk := func(i int) eventlog.Event {
		return eventlog.Event{Agent: "x", Stream: "s1", Type: "chunk", Data: []byte(strconv.Itoa(i))}
	}
	p, err := ba.Add(ctx, chunk(0))
	if err == nil {
		_, err = p.Wait(ctx)
	}
	if err != nil {
		t.Fatalf("a's first chunk: %v", err)
	}

	b.owner.set("x", eventlog.Token{Node: "b", Epoch: 2})
	if _, err := appendNote(ctx, b.lg, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.lg.AppendBatch(ctx, []eventlog.Event{chunk(100)}); err != nil {
		t.Fatal(err)
	}

	evs := []eventlog.Event{
		{Agent: "x", Type: "note.added", Data: []byte(`{}`)},
		{Agent: "x", Type: "note.added", Data: []byte(`{}`)},
		{Agent: "x", Type: "note.added", Data: []byte(`{}`)},
	}
	if _, err := a.lg.AppendBatch(ctx, evs); !errors.Is(err, eventlog.ErrFenced) && !errors.Is(err, eventlog.ErrConflict) {
		t.Fatalf("stale AppendBatch: %v, want fenced", err)
	}
	for i := 1; i <= 3; i++ {
		p, err := ba.Add(ctx, chunk(i))
		if err == nil {
			_, err = p.Wait(ctx)
		}
		if err == nil {
			t.Errorf("stale chunk %d stored", i)
		}
	}
	for _, f := range []eventlog.Filter{{Agent: "x"}, {Agent: "x", Stream: "s1"}} {
		got, err := b.lg.Read(ctx, f, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := eventlog.CheckWriters(got); err != nil {
			t.Errorf("%+v: %v", f, err)
		}
		if last := got[len(got)-1]; last.Writer.Node != "b" {
			t.Errorf("%+v: last event written by %q after b took x over", f, last.Writer.Node)
		}
	}
}

// TestFenceChunksInGroup: a stale owner's chunks inside one group with
// another agent's chunks fail alone with ErrFenced, and none of them lands,
// neither the stream's first (fenced by its expected sequence) nor the ones
// after it; the other agent's chunks are stored, in order. The group goes
// as one atomic batch and as a pipelined chain, whose chain header keeps
// the chunks after a refused one out.
func TestFenceChunksInGroup(t *testing.T) {
	for _, how := range []string{"atomic", "pipelined"} {
		t.Run(how, func(t *testing.T) {
			ctx := t.Context()
			nodes := openNodes(t, 2)
			a, b := nodes[0], nodes[1]
			eventlog.ForceSend(a.lg, how)
			a.owner.set("x", eventlog.Token{Node: "a", Epoch: 1})
			a.owner.set("y", eventlog.Token{Node: "a", Epoch: 1})
			chunk := func(agent, stream string, i int) eventlog.Event {
				return eventlog.Event{Agent: agent, Stream: stream, Type: "chunk", ID: stream + "/" + strconv.Itoa(i), Data: []byte(`{"type":"text-delta"}`)}
			}
			if _, err := a.lg.AppendBatch(ctx, []eventlog.Event{chunk("x", "s1", 0)}); err != nil {
				t.Fatal(err)
			}
			if _, err := a.lg.AppendBatch(ctx, []eventlog.Event{chunk("y", "s2", 0)}); err != nil {
				t.Fatal(err)
			}
			// b takes x over and continues its stream.
			b.owner.set("x", eventlog.Token{Node: "b", Epoch: 2})
			if _, err := b.lg.Append(ctx, chunk("x", "s1", 1)); err != nil {
				t.Fatalf("new owner's chunk: %v", err)
			}
			// One group of six, x's and y's interleaved.
			ab := a.lg.NewBatcher(eventlog.BatcherConfig{MaxCount: 6, MaxDelay: time.Hour})
			var ps []*eventlog.Pending
			for i := 1; i <= 3; i++ {
				for _, e := range []eventlog.Event{chunk("x", "s1", 100+i), chunk("y", "s2", i)} {
					p, err := ab.Add(ctx, e)
					if err != nil {
						t.Fatal(err)
					}
					ps = append(ps, p)
				}
			}
			bctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- ab.Run(bctx) }()
			defer func() { stop(); <-done }()
			for i, p := range ps {
				_, err := p.Wait(ctx)
				if i%2 == 0 && !errors.Is(err, eventlog.ErrFenced) {
					t.Errorf("stale chunk %d: got %v, want ErrFenced", i, err)
				}
				if i%2 == 1 && err != nil {
					t.Errorf("other agent's chunk %d: %v", i, err)
				}
			}
			for stream, want := range map[string][]string{"s1": {"s1/0", "s1/1"}, "s2": {"s2/0", "s2/1", "s2/2", "s2/3"}} {
				agent := map[string]string{"s1": "x", "s2": "y"}[stream]
				evs, err := b.lg.Read(ctx, eventlog.Filter{Agent: agent, Stream: stream}, 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				var ids []string
				for _, e := range evs {
					ids = append(ids, e.ID)
				}
				if fmt.Sprint(ids) != fmt.Sprint(want) {
					t.Errorf("stream %s = %v, want %v", stream, ids, want)
				}
				if err := eventlog.CheckWriters(evs); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestFenceChunksKeepsOwnersRead: the owner's LastSeq of a chat stream is
// the read the fence makes before the stream's first chunk, so that chunk
// is sent with no read of its own (a turn's start reads it: one leader
// read a turn less, each decoded by every server of a cluster); a stream
// not read first is read by the fence (the count below can fail); and a
// chunk another owner stored after the early read is still refused.
func TestFenceChunksKeepsOwnersRead(t *testing.T) {
	ctx := t.Context()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	a, b := &grants{}, &grants{}
	alg := eventlogtest.OpenOn(t, s, eventlog.Config{Owner: a})
	blg := eventlogtest.OpenOn(t, s, eventlog.Config{Owner: b})
	a.set("x", eventlog.Token{Node: "a", Epoch: 1})
	bctx, stop := context.WithCancel(ctx)
	defer stop()
	ab := alg.NewBatcher(eventlog.BatcherConfig{})
	done := make(chan error, 1)
	go func() { done <- ab.Run(bctx) }()
	defer func() { stop(); <-done }()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// A synchronous subscription: a request the server routed before a
	// Flush's PONG is in its pending count when Flush returns, where an
	// asynchronous handler might not have run yet.
	sub, err := nc.SubscribeSync("$JS.API.STREAM.MSG.GET.>")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	chunk := func(stream, id string) eventlog.Event {
		return eventlog.Event{Agent: "x", Stream: stream, Type: "chunk", ID: stream + "/" + id, Data: []byte(`{"type":"text-delta"}`)}
	}
	send := func(e eventlog.Event) error {
		t.Helper()
		p, err := ab.Add(ctx, e)
		if err != nil {
			return err
		}
		_, err = p.Wait(ctx)
		return err
	}
	readsOf := func(f func()) int32 {
		t.Helper()
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		drain := func() int32 {
			var n int32
			for {
				if _, err := sub.NextMsg(0); err != nil {
					return n
				}
				n++
			}
		}
		drain()
		f()
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		return drain()
	}

	if last, err := alg.LastSeq(ctx, eventlog.Filter{Agent: "x", Stream: "s1", Chunks: true}); err != nil || last != 0 {
		t.Fatalf("LastSeq of a new stream = %d, %v", last, err)
	}
	if n := readsOf(func() {
		if err := send(chunk("s1", "0")); err != nil {
			t.Fatalf("first chunk of s1: %v", err)
		}
	}); n != 0 {
		t.Errorf("the first chunk of a stream the owner read: %d leader reads, want none", n)
	}
	if n := readsOf(func() {
		if err := send(chunk("s2", "0")); err != nil {
			t.Fatalf("first chunk of s2: %v", err)
		}
	}); n == 0 {
		t.Errorf("the first chunk of a stream not read before: no leader read")
	}

	// Read early by a, then written by b, the new owner: a's chunk is refused.
	if _, err := alg.LastSeq(ctx, eventlog.Filter{Agent: "x", Stream: "s3", Chunks: true}); err != nil {
		t.Fatal(err)
	}
	b.set("x", eventlog.Token{Node: "b", Epoch: 2})
	if _, err := blg.Append(ctx, chunk("s3", "b0")); err != nil {
		t.Fatalf("new owner's chunk: %v", err)
	}
	if err := send(chunk("s3", "a0")); !errors.Is(err, eventlog.ErrFenced) {
		t.Errorf("a chunk after another owner's, on a stream read before it: %v, want ErrFenced", err)
	}
}
