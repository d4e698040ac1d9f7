package eventlog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// openCounterAt opens a Log on s with the compactable counter, waits
// until it applied every event of the log, and returns it with a stop
// that ends the counter and closes the Log.
func openCounterAt(t *testing.T, s *server.Server, cfg eventlog.Config) (*eventlog.Log, func()) {
	t.Helper()
	if cfg.Conn == nil {
		cfg.Conn = eventlogtest.Connect(t, s)
	}
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	lg, err := eventlog.Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	pr, err := lg.NewProjector(compactableCounter())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pr.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("counter: %v", err)
		}
		lg.Close()
	}
	t.Cleanup(stop)
	last := eventlog.SeqEnds
	if cfg.Shards == 0 {
		if last, err = lg.LastSeq(t.Context(), eventlog.Filter{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := pr.WaitFor(t.Context(), last); err != nil {
		t.Fatal(err)
	}
	return lg, stop
}

// history is what Read returns of an agent's events and chunks, without
// the sequences: type, id and data of each in order.
func history(t *testing.T, lg *eventlog.Log, agent string) ([]string, []eventlog.Event) {
	t.Helper()
	var out []string
	var all []eventlog.Event
	for _, chunks := range []bool{false, true} {
		evs, err := lg.Read(t.Context(), eventlog.Filter{Agent: agent, Chunks: chunks}, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			data := string(e.Data)
			if e.Type == eventlog.TypeSnapshot || e.Type == eventlog.TypeForked || e.Type == eventlog.TypeDeleted {
				data = "(upto)" // rewritten by the move: checked apart
			}
			out = append(out, fmt.Sprintf("%s/%s %s %s %s %s", e.Stream, e.Type, e.ID, data, e.Writer.Node, fmt.Sprint(e.Writer.Epoch)))
			all = append(all, e)
		}
	}
	return out, all
}

// upto returns the Upto of an event's data.
func upto(t *testing.T, e eventlog.Event) eventlog.Seq {
	t.Helper()
	var v struct {
		Upto eventlog.Seq `json:"upto"`
	}
	if err := json.Unmarshal(e.Data, &v); err != nil {
		t.Fatal(err)
	}
	return v.Upto
}

// TestMoveToShards: an unsharded log with plain, compacted, deleted and
// forked agents and chat streams, moved into shards, holds every agent's
// events and chunks in order with their writers; the references to
// sequences point where they did (a fork's to its parent's event, a
// snapshot's and a tombstone's just before it in the agent's shard); the
// view built on the old layout's Pebble is rebuilt and equals the one
// before; a second run (an interrupted move) gives the same; the parked
// streams take no write, FinishMove deletes them, and a move after it
// finds nothing to move.
func TestMoveToShards(t *testing.T) {
	ctx := t.Context()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	dir := t.TempDir()
	owner := &eventlogtest.Owner{}
	agents := agentsOverShards(t, 12, 8, 4)
	for _, a := range append(agents, "fork") {
		owner.Grant(a, eventlog.Token{Node: "n1", Epoch: 3})
	}
	old, stopOld := openCounterAt(t, s, eventlog.Config{Dir: dir, Owner: owner})
	var parentSeq eventlog.Seq
	for round := range 5 {
		for i, a := range agents {
			seq, err := old.Append(ctx, eventlog.Event{Agent: a, Type: "tick", Data: json.RawMessage(fmt.Sprint(round*100 + i))})
			if err != nil {
				t.Fatal(err)
			}
			if a == agents[2] && round == 3 {
				parentSeq = seq
			}
			if _, err := old.Append(ctx, eventlog.Event{Agent: a, Stream: "s" + fmt.Sprint(round%2), Type: "chunk", Data: json.RawMessage(`"x"`)}); err != nil {
				t.Fatal(err)
			}
		}
		if round == 3 {
			f, err := eventlog.NewEvent("fork", eventlog.TypeForked, eventlog.Forked{Parent: agents[2], Upto: parentSeq, Messages: 1})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := old.Append(ctx, f); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := old.Compact(ctx, agents[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Delete(ctx, agents[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Append(ctx, eventlog.Event{Agent: agents[0], Type: "tick", Data: json.RawMessage(`7`)}); err != nil {
		t.Fatal(err)
	}
	before := map[string][]string{}
	for _, a := range append(agents, "fork") {
		before[a], _ = history(t, old, a)
	}
	caught, stopCaught := openCounterAt(t, s, eventlog.Config{})
	wantView := dump(t, caught, "counter")
	stopCaught()
	if wantView["n/"+agents[0]] != "6" || len(wantView) != 2*12 {
		t.Fatalf("view before the move: %v", wantView)
	}
	delete(wantView, "n/fork") // its data (the fork's upto) changes
	delete(wantView, "h/fork")
	stopOld()

	js, err := jetstream.New(eventlogtest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	consBefore := oldConsumers(t, js)
	target := eventlog.Config{Conn: eventlogtest.Connect(t, s), Shards: 4, Partitions: 8}
	var rep eventlog.MoveReport
	for run := range 2 { // the second as after a crash part way
		if rep, err = eventlog.MoveToShards(ctx, target); err != nil {
			t.Fatalf("move, run %d: %v", run, err)
		}
	}
	if rep.Agents != 13 || rep.Remapped != 4 || rep.Events == 0 || rep.Chunks == 0 {
		t.Fatalf("moved %+v", rep)
	}
	// A consumer the old log's follower left may still go away meanwhile
	// (the server removes it after stopOld): only new ones count.
	if got := oldConsumers(t, js); slices.ContainsFunc(got, func(c string) bool { return !slices.Contains(consBefore, c) }) {
		t.Fatalf("consumers on the unsharded streams after two moves: %v, before %v: a copy's reader was left", got, consBefore)
	}
	if _, err := js.Publish(ctx, "forever.evt."+agents[3], []byte(`{}`)); err == nil {
		t.Fatal("an append of the old layout was stored after the move")
	}

	// Opened on the old layout's Pebble: the view is rebuilt.
	moved, _ := openCounterAt(t, s, eventlog.Config{Dir: dir, Shards: 4, Partitions: 8, Owner: owner})
	got := dump(t, moved, "counter")
	delete(got, "n/fork")
	delete(got, "h/fork")
	if !maps.Equal(got, wantView) {
		t.Fatalf("view after the move:\n%v\nwant\n%v", got, wantView)
	}
	for _, a := range append(agents, "fork") {
		h, evs := history(t, moved, a)
		if strings.Join(h, "\n") != strings.Join(before[a], "\n") {
			t.Fatalf("%s after the move:\n%s\nwant\n%s", a, strings.Join(h, "\n"), strings.Join(before[a], "\n"))
		}
		for _, e := range evs {
			if k, _ := eventlog.ShardOf(e.Seq); k != eventlog.PartitionOf(a, 8)%4 {
				t.Fatalf("%s's event %d is in shard %d", a, e.Seq, k)
			}
			switch e.Type {
			case eventlog.TypeSnapshot, eventlog.TypeDeleted:
				if u := upto(t, e); u != e.Seq-1 && e.Stream == "" || u == 0 {
					t.Fatalf("%s's %s at %d has upto %d, want the sequence before it", a, e.Type, e.Seq, u)
				}
			case eventlog.TypeForked:
				_, pevs := history(t, moved, agents[2])
				if u := upto(t, e); u != pevs[3].Seq {
					t.Fatalf("the fork's upto is %d, want its parent's fourth event %d", u, pevs[3].Seq)
				}
			}
		}
	}
	// The owner goes on writing under its fences.
	for _, a := range agents {
		if _, err := moved.Append(ctx, eventlog.Event{Agent: a, Type: "tick", Data: json.RawMessage(`1`)}); err != nil {
			t.Fatalf("append to %s after the move: %v", a, err)
		}
	}

	if err := eventlog.FinishMove(ctx, target); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(ctx, "FOREVER_EVENTS"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("the unsharded stream after FinishMove: %v", err)
	}
	if _, err := eventlog.MoveToShards(ctx, target); !errors.Is(err, eventlog.ErrNothingToMove) {
		t.Fatalf("move after the move: %v, want ErrNothingToMove", err)
	}
}

// oldConsumers returns the names of the consumers on the unsharded
// streams, sorted.
func oldConsumers(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	var names []string
	for _, stream := range []string{eventlog.DefaultEventsStream, eventlog.DefaultChunksStream} {
		st, err := js.Stream(t.Context(), stream)
		if err != nil {
			t.Fatal(err)
		}
		l := st.ConsumerNames(t.Context())
		for n := range l.Name() {
			names = append(names, stream+"/"+n)
		}
		if err := l.Err(); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(names)
	return names
}

// TestFailedMoveLeavesNoConsumer: a copy that fails part way (a stored
// chunk whose subject is not one of the log's) deletes the reader it
// opened on the unsharded stream, as a copy that ends does
// (TestMoveToShards).
func TestFailedMoveLeavesNoConsumer(t *testing.T) {
	ctx := t.Context()
	lg, s := eventlogtest.Open(t, eventlog.Config{})
	if _, err := lg.Append(ctx, eventlog.Event{Agent: "a1", Stream: "s1", Type: "chunk", Data: json.RawMessage(`"x"`)}); err != nil {
		t.Fatal(err)
	}
	lg.Close()
	js, err := jetstream.New(eventlogtest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "forever.chunk.a2", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	before := oldConsumers(t, js)
	_, err = eventlog.MoveToShards(ctx, eventlog.Config{Conn: eventlogtest.Connect(t, s), Shards: 2, Partitions: 4})
	if err == nil || !strings.Contains(err.Error(), "not one of the log's") {
		t.Fatalf("move of a chunk with a foreign subject: %v, want its refusal", err)
	}
	if got := oldConsumers(t, js); !slices.Equal(got, before) {
		t.Fatalf("consumers on the unsharded streams after a failed move: %v, before %v", got, before)
	}
}
