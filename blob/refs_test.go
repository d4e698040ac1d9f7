package blob_test

import (
	"encoding/binary"
	"iter"
	"maps"
	"slices"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/forever-agents/forever/blob"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// rowsView keeps each event's data as a row of its agent, as chat's views
// keep messages: a snapshot holds them.
func rowsView() eventlog.Projection {
	return eventlog.Projection{
		Name: "rows", Version: 1,
		Apply: func(b *eventlog.Batch, e eventlog.Event) error {
			if e.Type == eventlog.TypeSnapshot || e.Type == eventlog.TypeForked {
				return nil
			}
			return b.Set(binary.BigEndian.AppendUint64([]byte(e.Agent+"\x00"), uint64(e.Seq)), e.Data)
		},
		AgentRows: func(r eventlog.Reader, agent string) iter.Seq2[eventlog.KV, error] {
			return eventlog.Rows(r, nil, [][]byte{[]byte(agent + "\x00")})
		},
	}
}

// refsNode is a log over a fresh Pebble directory with the rows view and,
// when refs is set, the references view.
type refsNode struct {
	lg    *eventlog.Log
	views *eventlog.Follower
}

func openRefsNode(t *testing.T, s *server.Server, refs bool) *refsNode {
	t.Helper()
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{})
	f, err := lg.NewFollower()
	if err != nil {
		t.Fatal(err)
	}
	ps := []eventlog.Projection{rowsView()}
	if refs {
		ps = append(ps, blob.RefsView())
	}
	for _, p := range ps {
		if err := f.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	eventlogtest.RunFollower(t, f)
	return &refsNode{lg: lg, views: f}
}

// referenced returns the digests the references view names, caught up.
func (n *refsNode) referenced(t *testing.T) []string {
	t.Helper()
	last, err := n.lg.LastSeq(t.Context(), eventlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.views.WaitFor(t.Context(), last); err != nil {
		t.Fatal(err)
	}
	v, err := n.lg.View(blob.ViewName)
	if err != nil {
		t.Fatal(err)
	}
	used, err := blob.Referenced(v)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Sorted(maps.Keys(used))
}

func (n *refsNode) append(t *testing.T, agent, typ string, v any) {
	t.Helper()
	e, err := eventlog.NewEvent(agent, typ, v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.lg.Append(t.Context(), e); err != nil {
		t.Fatal(err)
	}
}

func names(refs ...blob.Ref) []string {
	var out []string
	for _, r := range refs {
		n, _ := r.Name()
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// The references view names what an agent's events name; an agent
// compacted before the view existed keeps the references its snapshot's
// rows hold; a compaction keeps them; a fork inherits its parent's, kept
// when the parent is deleted; a delete drops an agent's. A view rebuilt
// from the log on an empty Pebble ends with the same rows.
func TestRefsView(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	r1, r2, r3 := blob.RefOf([]byte("one")), blob.RefOf([]byte("two")), blob.RefOf([]byte("three"))
	type msg struct {
		Output *blob.Ref `json:"output,omitempty"`
		Nested any       `json:"nested,omitempty"`
	}

	// A node of a release without the view stores and compacts a.
	old := openRefsNode(t, s, false)
	old.append(t, "a", "message.added", msg{Output: &r1})
	old.append(t, "a", "message.added", msg{Nested: map[string]any{"parts": []msg{{Output: &r2}}}})
	if _, err := old.lg.Compact(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}

	n := openRefsNode(t, s, true)
	if got, want := n.referenced(t), names(r1, r2); !slices.Equal(got, want) {
		t.Fatalf("after a snapshot without the view: %v, want %v", got, want)
	}
	n.append(t, "b", "op.completed", msg{Output: &r3})
	n.append(t, "b", "op.completed", msg{Output: &r1})
	if _, err := n.lg.Compact(t.Context(), "b"); err != nil {
		t.Fatal(err)
	}
	n.append(t, "f", eventlog.TypeForked, eventlog.Forked{Parent: "a", Upto: 1})
	if _, err := n.lg.Delete(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	if got, want := n.referenced(t), names(r1, r2, r3); !slices.Equal(got, want) {
		t.Fatalf("after a's delete with its fork f and b: %v, want %v", got, want)
	}
	if _, err := n.lg.Delete(t.Context(), "f"); err != nil {
		t.Fatal(err)
	}
	if got, want := n.referenced(t), names(r1, r3); !slices.Equal(got, want) {
		t.Fatalf("after f's delete: %v, want b's %v", got, want)
	}

	rebuilt := openRefsNode(t, s, true)
	if got, want := rebuilt.referenced(t), names(r1, r3); !slices.Equal(got, want) {
		t.Fatalf("rebuilt from the log: %v, want %v", got, want)
	}
	if _, err := n.lg.Delete(t.Context(), "b"); err != nil {
		t.Fatal(err)
	}
	if got := n.referenced(t); len(got) != 0 {
		t.Fatalf("after every delete: %v", got)
	}
}
