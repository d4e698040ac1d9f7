package eventlog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/nats-io/nats.go/jetstream"
)

func ev(agent, typ string, v any) eventlog.Event {
	data, _ := json.Marshal(v)
	return eventlog.Event{Agent: agent, Type: typ, Data: data}
}

func TestAppendAndRead(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	ctx := t.Context()
	for i := range 5 {
		seq, err := lg.Append(ctx, ev("a1", "note.added", i))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := seq, eventlog.Seq(i+1); got != want {
			t.Fatalf("seq = %d, want %d", got, want)
		}
	}
	if _, err := lg.Append(ctx, ev("a2", "note.added", 99)); err != nil {
		t.Fatal(err)
	}
	got, err := lg.Read(ctx, eventlog.Filter{Agent: "a1"}, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Seq != 3 || got[2].Seq != 5 {
		t.Fatalf("read after 2: %+v", got)
	}
	var n int
	if err := got[0].Decode(&n); err != nil || n != 2 {
		t.Fatalf("decode = %d, %v", n, err)
	}
	if got[0].Subject != "forever.evt.a1" || got[0].Type != "note.added" || got[0].ID == "" || got[0].Time.IsZero() {
		t.Fatalf("event fields: %+v", got[0])
	}
	none, err := lg.Read(ctx, eventlog.Filter{Agent: "nobody"}, 0, 0)
	if err != nil || len(none) != 0 {
		t.Fatalf("read unknown agent: %v, %v", none, err)
	}
}

// Next and Last read one matching event in one direct get: ok is false on
// an empty subject (and for Next past the end), and a corrupt stored event
// comes back with its sequence.
func TestNext(t *testing.T) {
	lg, s := eventlogtest.Open(t, eventlog.Config{})
	ctx := t.Context()
	a1 := eventlog.Filter{Agent: "a1"}
	if _, ok, err := lg.Next(ctx, a1, 0); ok || err != nil {
		t.Fatalf("empty: ok %v, err %v", ok, err)
	}
	if _, ok, err := lg.Last(ctx, a1); ok || err != nil {
		t.Fatalf("Last of empty: ok %v, err %v", ok, err)
	}
	for i := range 3 {
		if _, err := lg.Append(ctx, ev("a1", "note.added", i)); err != nil {
			t.Fatal(err)
		}
		if _, err := lg.Append(ctx, ev("a2", "note.added", i)); err != nil {
			t.Fatal(err)
		}
	}
	// a1 holds 1, 3, 5.
	for _, tt := range []struct {
		after, want eventlog.Seq
		ok          bool
	}{{0, 1, true}, {1, 3, true}, {2, 3, true}, {4, 5, true}, {5, 0, false}, {99, 0, false}} {
		e, ok, err := lg.Next(ctx, a1, tt.after)
		if err != nil || ok != tt.ok || e.Seq != tt.want {
			t.Errorf("Next after %d = seq %d, ok %v, err %v; want seq %d, ok %v", tt.after, e.Seq, ok, err, tt.want, tt.ok)
		}
		if ok && (e.Subject != "forever.evt.a1" || e.Type != "note.added") {
			t.Errorf("Next after %d: %+v", tt.after, e)
		}
	}
	if e, ok, err := lg.Last(ctx, a1); !ok || err != nil || e.Seq != 5 || e.Subject != "forever.evt.a1" {
		t.Fatalf("Last = %+v, ok %v, err %v; want seq 5", e, ok, err)
	}
	raw := eventlogtest.Connect(t, s)
	if _, err := raw.Request("forever.evt.a1", []byte("{not json"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if e, ok, err := lg.Last(ctx, a1); !ok || !errors.As(err, new(*eventlog.CorruptError)) || e.Seq != 7 {
		t.Fatalf("Last of corrupt: %+v, ok %v, err %v; want a corrupt event at 7", e, ok, err)
	}
	e, ok, err := lg.Next(ctx, a1, 5)
	var ce *eventlog.CorruptError
	if !ok || !errors.As(err, &ce) || ce.Seq != 7 || e.Seq != 7 {
		t.Fatalf("corrupt: %+v, ok %v, err %v; want a corrupt event at 7", e, ok, err)
	}
	if _, _, err := lg.Next(ctx, eventlog.Filter{Agent: "a.b"}, 0); err == nil {
		t.Fatal("invalid agent: no error")
	}
}

func TestAppendDuplicate(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	ctx := t.Context()
	e := ev("a1", "note.added", 1)
	e.ID = "fixed-id"
	seq1, err := lg.Append(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	seq2, err := lg.Append(ctx, e)
	if !errors.Is(err, eventlog.ErrDuplicate) {
		t.Fatalf("second append err = %v, want ErrDuplicate", err)
	}
	if seq2 != seq1 {
		t.Fatalf("duplicate seq = %d, want original %d", seq2, seq1)
	}
	all, err := lg.Read(ctx, eventlog.Filter{}, 0, 0)
	if err != nil || len(all) != 1 {
		t.Fatalf("events stored = %d (%v), want 1", len(all), err)
	}
}

// Two writers race to append to one agent with the expected last sequence
// they observed; exactly one wins each round and the loser gets ErrConflict.
func TestAppendConflict(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	ctx := t.Context()
	var last eventlog.Seq
	for round := range 50 {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		seqs := make([]eventlog.Seq, 2)
		for w := range 2 {
			wg.Go(func() {
				seqs[w], errs[w] = lg.Append(ctx, ev("a1", "note.added", fmt.Sprint(round, w)), eventlog.ExpectSeq(last))
			})
		}
		wg.Wait()
		var wins int
		for w := range 2 {
			switch {
			case errs[w] == nil:
				wins++
				last = seqs[w]
			case errors.Is(errs[w], eventlog.ErrConflict):
			default:
				t.Fatalf("round %d writer %d: %v", round, w, errs[w])
			}
		}
		if wins != 1 {
			t.Fatalf("round %d: %d winners, want 1 (%v)", round, wins, errs)
		}
	}
	all, err := lg.Read(ctx, eventlog.Filter{Agent: "a1"}, 0, 0)
	if err != nil || len(all) != 50 {
		t.Fatalf("stored %d events (%v), want 50", len(all), err)
	}
	// ExpectSeq(0) on a fresh subject succeeds once.
	if _, err := lg.Append(ctx, ev("fresh", "x", 1), eventlog.ExpectSeq(0)); err != nil {
		t.Fatal(err)
	}
	if _, err := lg.Append(ctx, ev("fresh", "x", 2), eventlog.ExpectSeq(0)); !errors.Is(err, eventlog.ErrConflict) {
		t.Fatalf("err = %v, want ErrConflict", err)
	}
}

func TestAppendBadInput(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	ctx := t.Context()
	if _, err := lg.Append(ctx, ev("a1", "ok", 1)); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", int(lg.MaxPayload()))
	tests := []struct {
		name string
		e    eventlog.Event
		want error
	}{
		{"agent with dot", ev("a.b", "t", 1), eventlog.ErrInvalid},
		{"agent wildcard", ev("a*", "t", 1), eventlog.ErrInvalid},
		{"agent empty", ev("", "t", 1), eventlog.ErrInvalid},
		{"agent space", ev("a b", "t", 1), eventlog.ErrInvalid},
		{"type empty", ev("a1", "", 1), eventlog.ErrInvalid},
		{"type wildcard", ev("a1", "fiber.>", 1), eventlog.ErrInvalid},
		{"type empty token", ev("a1", "fiber..x", 1), eventlog.ErrInvalid},
		{"stream with dot", eventlog.Event{Agent: "a1", Stream: "s.1", Type: "t"}, eventlog.ErrInvalid},
		{"data not json", eventlog.Event{Agent: "a1", Type: "t", Data: []byte("{")}, eventlog.ErrInvalid},
		{"too large", ev("a1", "t", big), eventlog.ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := lg.Append(ctx, tt.e)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if _, err := lg.AppendBatch(ctx, []eventlog.Event{ev("a1", "ok", 1), tt.e}); !errors.Is(err, tt.want) {
				t.Fatalf("batch err = %v, want %v", err, tt.want)
			}
		})
	}
	all, err := lg.Read(ctx, eventlog.Filter{}, 0, 0)
	if err != nil || len(all) != 1 {
		t.Fatalf("stored %d events (%v), want the 1 good one", len(all), err)
	}
}

func TestAppendBatch(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{MaxBatch: 100})
	ctx := t.Context()
	evs := make([]eventlog.Event, 250)
	for i := range evs {
		evs[i] = eventlog.Event{Agent: "a1", Stream: "s1", Type: "chunk", ID: fmt.Sprintf("s1/%d", i), Data: json.RawMessage(fmt.Sprint(i))}
	}
	last, err := lg.AppendBatch(ctx, evs)
	if err != nil {
		t.Fatal(err)
	}
	if last != 250 {
		t.Fatalf("last = %d, want 250", last)
	}
	got, err := lg.Read(ctx, eventlog.Filter{Agent: "a1", Stream: "s1"}, 0, 0)
	if err != nil || len(got) != 250 {
		t.Fatalf("read %d (%v)", len(got), err)
	}
	for i, e := range got {
		var n int
		if err := e.Decode(&n); err != nil || n != i || e.Subject != "forever.chunk.a1.s1" {
			t.Fatalf("chunk %d = %d %q %v", i, n, e.Subject, err)
		}
	}
	// A retried batch is recognised, not stored again.
	if _, err := lg.AppendBatch(ctx, evs[200:]); !errors.Is(err, eventlog.ErrDuplicate) {
		t.Fatalf("retry err = %v, want ErrDuplicate", err)
	}
	if n, _ := lg.LastSeq(ctx, eventlog.Filter{Chunks: true}); n != 250 {
		t.Fatalf("last seq after retry = %d, want 250", n)
	}
	// Mixing streams is refused.
	if _, err := lg.AppendBatch(ctx, []eventlog.Event{ev("a1", "x", 1), evs[0]}); !errors.Is(err, eventlog.ErrInvalid) {
		t.Fatalf("mixed err = %v", err)
	}
	// ExpectSeq applies to the batch's first event.
	next := []eventlog.Event{{Agent: "a1", Stream: "s1", Type: "chunk"}, {Agent: "a1", Stream: "s1", Type: "chunk"}}
	if _, err := lg.AppendBatch(ctx, next, eventlog.ExpectSeq(7)); !errors.Is(err, eventlog.ErrConflict) {
		t.Fatalf("stale batch err = %v, want ErrConflict", err)
	}
	if _, err := lg.AppendBatch(ctx, next, eventlog.ExpectSeq(250)); err != nil {
		t.Fatal(err)
	}
}

func TestFollowHistoryThenLive(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for i := range 10 {
		if _, err := lg.Append(ctx, ev("a1", "n", i)); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		for i := 10; i < 20; i++ {
			lg.Append(ctx, ev("a1", "n", i))
		}
	}()
	want := eventlog.Seq(4)
	for e, err := range lg.Follow(ctx, eventlog.Filter{Agent: "a1"}, 3) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Seq != want {
			t.Fatalf("seq %d, want %d", e.Seq, want)
		}
		if want == 20 {
			break
		}
		want++
	}
}

func TestBatcher(t *testing.T) {
	t.Run("atomic", func(t *testing.T) { testBatcher(t, false) })
	t.Run("async", func(t *testing.T) { testBatcher(t, true) })
}

func testBatcher(t *testing.T, async bool) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{AsyncBatches: async})
	b := lg.NewBatcher(eventlog.BatcherConfig{MaxCount: 50})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	const writers, each = 8, 200
	var wg sync.WaitGroup
	lastSeqs := make([]eventlog.Seq, writers)
	for w := range writers {
		wg.Go(func() {
			var last *eventlog.Pending
			for i := range each {
				p, err := b.Add(ctx, eventlog.Event{Agent: "a1", Stream: fmt.Sprint("s", w), Type: "chunk", ID: fmt.Sprintf("s%d/%d", w, i), Data: json.RawMessage(fmt.Sprint(i))})
				if err != nil {
					t.Error(err)
					return
				}
				last = p
			}
			seq, err := last.Wait(ctx)
			if err != nil {
				t.Error(err)
			}
			lastSeqs[w] = seq
		})
	}
	wg.Wait()
	// Each writer's chunks are stored once, in the order added.
	for w := range writers {
		got, err := lg.Read(t.Context(), eventlog.Filter{Agent: "a1", Stream: fmt.Sprint("s", w)}, 0, 0)
		if err != nil || len(got) != each {
			t.Fatalf("writer %d: %d chunks (%v)", w, len(got), err)
		}
		if got[each-1].Seq != lastSeqs[w] {
			t.Fatalf("writer %d: Wait said seq %d, stored at %d", w, lastSeqs[w], got[each-1].Seq)
		}
		for i, e := range got {
			if e.ID != fmt.Sprintf("s%d/%d", w, i) {
				t.Fatalf("writer %d chunk %d is %s", w, i, e.ID)
			}
		}
	}
	// Bad input is refused at Add and queues nothing.
	if _, err := b.Add(ctx, eventlog.Event{Agent: "a.1", Stream: "s", Type: "chunk"}); !errors.Is(err, eventlog.ErrInvalid) {
		t.Fatalf("bad add: %v", err)
	}
	// Adds queued when Run stops are still committed.
	p, err := b.Add(ctx, eventlog.Event{Agent: "a1", Stream: "last", Type: "chunk"})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if seq, err := p.Wait(t.Context()); err != nil || seq == 0 {
		t.Fatalf("queued at stop: seq %d, %v", seq, err)
	}
	if _, err := b.Add(t.Context(), eventlog.Event{Agent: "a1", Stream: "s", Type: "chunk"}); !errors.Is(err, eventlog.ErrStopped) {
		t.Fatalf("add after stop: %v", err)
	}
}

// With AsyncBatches (for sync interval) AppendBatch keeps order, dedup and
// the expected sequence of the first event.
func TestAppendBatchAsync(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{AsyncBatches: true, MaxBatch: 50})
	ctx := t.Context()
	evs := make([]eventlog.Event, 120)
	for i := range evs {
		evs[i] = eventlog.Event{Agent: "a1", Stream: "s1", Type: "chunk", ID: fmt.Sprintf("s1/%d", i), Data: json.RawMessage(fmt.Sprint(i))}
	}
	if last, err := lg.AppendBatch(ctx, evs); err != nil || last != 120 {
		t.Fatalf("last %d, %v", last, err)
	}
	if _, err := lg.AppendBatch(ctx, evs[100:]); !errors.Is(err, eventlog.ErrDuplicate) {
		t.Fatalf("retry: %v", err)
	}
	got, err := lg.Read(ctx, eventlog.Filter{Agent: "a1", Stream: "s1"}, 0, 0)
	if err != nil || len(got) != 120 {
		t.Fatalf("read %d, %v", len(got), err)
	}
	for i, e := range got {
		if e.ID != fmt.Sprintf("s1/%d", i) {
			t.Fatalf("event %d is %s", i, e.ID)
		}
	}
	next := []eventlog.Event{{Agent: "a1", Stream: "s1", Type: "chunk"}, {Agent: "a1", Stream: "s1", Type: "chunk"}}
	if _, err := lg.AppendBatch(ctx, next, eventlog.ExpectSeq(3)); !errors.Is(err, eventlog.ErrConflict) {
		t.Fatalf("stale: %v", err)
	}
}

// A client that binds leaves the server's stream config alone and fails
// clearly when the streams do not exist.
func TestBind(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	nc := eventlogtest.Connect(t, s)
	if _, err := eventlog.Open(t.Context(), eventlog.Config{Conn: nc, Bind: true}); err == nil || !strings.Contains(err.Error(), "is agentd running?") {
		t.Fatalf("bind before create: %v", err)
	}
	owner := eventlogtest.OpenOn(t, s, eventlog.Config{ChunkSafetyAge: time.Hour})
	client, err := eventlog.Open(t.Context(), eventlog.Config{Conn: nc, Bind: true, ChunkSafetyAge: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	seq, err := client.Append(t.Context(), ev("a1", "x", 1))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := owner.LastSeq(t.Context(), eventlog.Filter{}); got != seq {
		t.Fatalf("owner sees %d, want %d", got, seq)
	}
	js, _ := jetstream.New(nc)
	st, err := js.Stream(t.Context(), eventlog.DefaultChunksStream)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxAge; got != time.Hour {
		t.Fatalf("chunk max age = %v after a client bound, want 1h", got)
	}
}
