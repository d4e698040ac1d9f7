package eventlog_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/forever-agents/forever/eventlog"
)

// refuseFirst refuses the first n sends of subject, as a stream leader
// behind its log does during an election.
func refuseFirst(subject string, n int32) (func(string, string) bool, *atomic.Int32) {
	var refused atomic.Int32
	return func(subj, _ string) bool {
		if subj != subject {
			return false
		}
		for {
			c := refused.Load()
			if c >= n {
				return false
			}
			if refused.CompareAndSwap(c, c+1) {
				return true
			}
		}
	}, &refused
}

// runBatcher runs b until the test ends.
func runBatcher(t *testing.T, b *eventlog.Batcher) {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

func textChunk(agent, stream string, i int) eventlog.Event {
	return eventlog.Event{Agent: agent, Stream: stream, Type: "chunk", ID: stream + "/" + strconv.Itoa(i), Data: []byte(`{"type":"text-delta"}`)}
}

// chunkIDs reads the ids of agent's stream.
func chunkIDs(t *testing.T, lg *eventlog.Log, agent, stream string) []string {
	t.Helper()
	evs, err := lg.Read(t.Context(), eventlog.Filter{Agent: agent, Stream: stream}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range evs {
		ids = append(ids, e.ID)
	}
	return ids
}

// TestLeaderBehindIsNotAWriter: JetStream refusing a fenced append with
// "wrong last sequence" while the subject is where this writer left it (a
// stream leader that has not caught up, during an election) fences nobody.
// A refusal that passes is sent again and stored; one that keeps coming
// fails as ErrUnavailable and Unwritten, and the next append goes on.
func TestLeaderBehindIsNotAWriter(t *testing.T) {
	t.Run("event once", func(t *testing.T) {
		nd := openNodes(t, 1)[0]
		nd.owner.set("x", eventlog.Token{Node: "a", Epoch: 1})
		if _, err := appendNote(t.Context(), nd.lg, "x"); err != nil {
			t.Fatal(err)
		}
		refuse, refused := refuseFirst(nd.lg.EventsSubject("x"), 1)
		eventlog.SkewExpect(nd.lg, refuse)
		_, err := appendNote(t.Context(), nd.lg, "x")
		if refused.Load() != 1 {
			t.Fatal("no append was refused")
		}
		if err == nil || !eventlog.Unavailable(err) || !eventlog.Unwritten(err) || eventlog.OwnerLost(err) || errors.Is(err, eventlog.ErrConflict) {
			t.Fatalf("refused append: %v; want an Unavailable, Unwritten error that is neither OwnerLost nor ErrConflict", err)
		}
		if _, err := appendNote(t.Context(), nd.lg, "x"); err != nil {
			t.Fatalf("the append after the refusal: %v", err)
		}
		select {
		case a := <-nd.fenced:
			t.Fatalf("agent %s reported fenced", a)
		default:
		}
		evs, err := nd.lg.Read(t.Context(), eventlog.Filter{Agent: "x"}, 0, 0)
		if err != nil || len(evs) != 2 {
			t.Fatalf("stored %d events (%v), want 2", len(evs), err)
		}
	})
	for _, tc := range []struct {
		name    string
		refuse  int32
		wantErr bool
	}{{"chunk once", 1, false}, {"chunk always", 1000, true}} {
		t.Run(tc.name, func(t *testing.T) {
			nd := openNodes(t, 1)[0]
			nd.owner.set("x", eventlog.Token{Node: "a", Epoch: 1})
			b := nd.lg.NewBatcher(eventlog.BatcherConfig{MaxCount: 1})
			runBatcher(t, b)
			add := func(i int) error {
				p, err := b.Add(t.Context(), textChunk("x", "s1", i))
				if err != nil {
					return err
				}
				_, err = p.Wait(t.Context())
				return err
			}
			if err := add(0); err != nil {
				t.Fatal(err)
			}
			refuse, refused := refuseFirst(nd.lg.ChunksSubject("x", "s1"), tc.refuse)
			eventlog.SkewExpect(nd.lg, refuse)
			err := add(1)
			if refused.Load() == 0 {
				t.Fatal("no chunk was refused")
			}
			switch {
			case !tc.wantErr && err != nil:
				t.Fatalf("chunk refused once: %v, want it sent again and stored", err)
			case tc.wantErr && (err == nil || !eventlog.Unavailable(err) || eventlog.OwnerLost(err) || errors.Is(err, eventlog.ErrConflict)):
				t.Fatalf("chunk always refused: %v, want an Unavailable error that is neither OwnerLost nor ErrConflict", err)
			}
			eventlog.SkewExpect(nd.lg, nil)
			if err := add(2); err != nil {
				t.Fatalf("the chunk after the refusals: %v", err)
			}
			want := []string{"s1/0", "s1/1", "s1/2"}
			if tc.wantErr {
				want = []string{"s1/0", "s1/2"} // unchained Adds: each stands alone
			}
			if got := chunkIDs(t, nd.lg, "x", "s1"); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("stored %v, want %v", got, want)
			}
			select {
			case a := <-nd.fenced:
				t.Fatalf("agent %s reported fenced", a)
			default:
			}
		})
	}
}

// TestChainedChunksLeaveNoGap: chunks chained with After are stored as a
// prefix: when one fails, every chunk queued behind it fails unsent, also
// those in later groups whose own send would have been accepted.
func TestChainedChunksLeaveNoGap(t *testing.T) {
	nd := openNodes(t, 1)[0]
	nd.owner.set("x", eventlog.Token{Node: "a", Epoch: 1})
	// Chunk 2's sends are refused, every time; the others' would pass.
	eventlog.SkewExpect(nd.lg, func(_, id string) bool { return id == "s1/2" })
	b := nd.lg.NewBatcher(eventlog.BatcherConfig{MaxCount: 1})
	runBatcher(t, b)
	var ps []*eventlog.Pending
	var prev *eventlog.Pending
	for i := range 5 {
		p, err := b.Add(t.Context(), textChunk("x", "s1", i), eventlog.After(prev))
		if err != nil {
			t.Fatal(err)
		}
		ps, prev = append(ps, p), p
	}
	for i, p := range ps {
		_, err := p.Wait(t.Context())
		if i < 2 && err != nil {
			t.Errorf("chunk %d: %v", i, err)
		}
		if i >= 2 && (err == nil || !eventlog.Unavailable(err)) {
			t.Errorf("chunk %d: %v, want the refused chunk's ErrUnavailable", i, err)
		}
		if i > 2 && err != nil && !errors.Is(err, eventlog.ErrUnavailable) {
			t.Errorf("chunk %d does not carry its chain's error class: %v", i, err)
		}
	}
	if got := chunkIDs(t, nd.lg, "x", "s1"); fmt.Sprint(got) != fmt.Sprint([]string{"s1/0", "s1/1"}) {
		t.Fatalf("stored %v, want [s1/0 s1/1]: a prefix, no gap", got)
	}
}

// TestLeaderReadWaitsOutAnElection: a fenced append whose leader read is
// refused while the stream elects a leader (10008: the leaders' spread
// steps one down) reads again and is stored; refused for longer than the
// retries (about 1.5 s), it fails Unavailable and Unwritten.
func TestLeaderReadWaitsOutAnElection(t *testing.T) {
	nd := openNodes(t, 1)[0]
	nd.owner.set("x", eventlog.Token{Node: "a", Epoch: 1})
	var refusals atomic.Int32
	refusals.Store(3)
	eventlog.RefuseLeaderGets(nd.lg, func() bool { return refusals.Add(-1) >= 0 })
	if _, err := appendNote(t.Context(), nd.lg, "x"); err != nil {
		t.Fatalf("append after 3 refused leader reads: %v", err)
	}
	if n := refusals.Load(); n >= 0 {
		t.Fatalf("the leader reads were not refused (%d refusals left)", n)
	}
	nd.owner.set("y", eventlog.Token{Node: "a", Epoch: 1})
	eventlog.RefuseLeaderGets(nd.lg, func() bool { return true })
	_, err := appendNote(t.Context(), nd.lg, "y")
	if !eventlog.Unavailable(err) || !eventlog.Unwritten(err) {
		t.Fatalf("append while the leader reads are refused for good: %v, want Unavailable and Unwritten", err)
	}
}
