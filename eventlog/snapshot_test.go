package eventlog_test

import (
	"context"
	"errors"
	"iter"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/nats-io/nats-server/v2/server"
)

// compactableCounter is the counter projection with AgentRows.
func compactableCounter() eventlog.Projection {
	p := counter(1)
	apply := p.Apply
	p.Apply = func(b *eventlog.Batch, e eventlog.Event) error {
		if e.Type == eventlog.TypeSnapshot {
			return nil // its rows are in place
		}
		return apply(b, e)
	}
	p.AgentRows = func(r eventlog.Reader, agent string) iter.Seq2[eventlog.KV, error] {
		return eventlog.Rows(r, [][]byte{[]byte("n/" + agent), []byte("h/" + agent)}, nil)
	}
	return p
}

// openCounter opens a Log on s with a fresh Pebble dir and the compactable
// counter running.
func openCounter(t *testing.T, s *server.Server, cfg eventlog.Config) *eventlog.Log {
	t.Helper()
	lg := eventlogtest.OpenOn(t, s, cfg)
	pr, err := lg.NewProjector(compactableCounter())
	if err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunProjector(t, pr)
	return lg
}

func waitAll(t *testing.T, lg *eventlog.Log) {
	t.Helper()
	last, err := lg.LastSeq(t.Context(), eventlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	// A second Log's projector: wait through Compact's own wait is not
	// available, so poll the stored cursor.
	for {
		c, err := eventlog.StoredCursor(lg, "counter")
		if err != nil {
			t.Fatal(err)
		}
		if c >= last {
			return
		}
		select {
		case <-t.Context().Done():
			t.Fatal("views never caught up")
		default:
		}
	}
}

// TestCompactKeepsTheView: compacting an agent leaves one snapshot in its
// place in the log, the view's rows unchanged; a view rebuilt from an
// empty Pebble gives the same rows, with the events after the snapshot
// applied on top; the other agents' histories are untouched.
func TestCompactKeepsTheView(t *testing.T) {
	for _, crash := range []bool{false, true} {
		name := "purged"
		if crash {
			name = "stopped-before-purge"
		}
		t.Run(name, func(t *testing.T) {
			s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
			lg := openCounter(t, s, eventlog.Config{})
			appendN(t, lg, 3000, 3)
			waitAll(t, lg)
			before := dump(t, lg, "counter")
			if crash {
				eventlog.StopCompact(lg, func(point string) error { return errors.New("crash at " + point) })
			}
			c, err := lg.Compact(t.Context(), "agent0")
			if crash != (err != nil) {
				t.Fatalf("compact: %+v, %v", c, err)
			}
			if c.Parts != 1 || c.Rows != 2 {
				t.Fatalf("compacted %+v, want one part with the agent's 2 rows", c)
			}
			waitAll(t, lg)
			if after := dump(t, lg, "counter"); !equalMaps(before, after) {
				t.Fatalf("rows changed by the snapshot:\n%v\n%v", before, after)
			}
			evs, err := lg.Read(t.Context(), eventlog.Filter{Agent: "agent0"}, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if want := 1001; crash && len(evs) != want || !crash && (len(evs) != 1 || evs[0].Type != eventlog.TypeSnapshot) {
				t.Fatalf("agent0 has %d events after compaction (crash %v)", len(evs), crash)
			}
			if evs, _ := lg.Read(t.Context(), eventlog.Filter{Agent: "agent1"}, 0, 0); len(evs) != 1000 {
				t.Fatalf("agent1 has %d events, want its 1000", len(evs))
			}

			// Rebuild from an empty Pebble, before and after more events.
			rebuilt := openCounter(t, s, eventlog.Config{})
			waitAll(t, rebuilt)
			if got := dump(t, rebuilt, "counter"); !equalMaps(before, got) {
				t.Fatalf("rebuilt from the snapshot:\n%v\nwant\n%v", got, before)
			}
			if _, err := lg.Append(t.Context(), eventlog.Event{Agent: "agent0", Type: "tick", Data: []byte(`"more"`)}); err != nil {
				t.Fatal(err)
			}
			waitAll(t, lg)
			waitAll(t, rebuilt)
			if a, b := dump(t, lg, "counter"), dump(t, rebuilt, "counter"); !equalMaps(a, b) || a["n/agent0"] != "1001" {
				t.Fatalf("after one more event: live %v, rebuilt %v", a, b)
			}

			// The next compaction purges what a stopped one left, once.
			eventlog.StopCompact(lg, nil)
			if _, err := lg.Compact(t.Context(), "agent0"); err != nil {
				t.Fatal(err)
			}
			if _, err := lg.Compact(t.Context(), "agent0"); !errors.Is(err, eventlog.ErrNothingToCompact) {
				t.Fatalf("compact twice: %v, want ErrNothingToCompact", err)
			}
			if evs, _ := lg.Read(t.Context(), eventlog.Filter{Agent: "agent0"}, 0, 0); len(evs) != 1 {
				t.Fatalf("agent0 has %d events after the second compaction, want its snapshot", len(evs))
			}
			last := openCounter(t, s, eventlog.Config{})
			waitAll(t, last)
			if a, b := dump(t, lg, "counter"), dump(t, last, "counter"); !equalMaps(a, b) {
				t.Fatalf("rebuilt after two compactions: %v, want %v", b, a)
			}
		})
	}
}

// TestCompactRefuses: an agent that wrote after the read conflicts; a
// projection without AgentRows makes Compact refuse.
func TestCompactRefuses(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	pr, err := lg.NewProjector(counter(1))
	if err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunProjector(t, pr)
	appendN(t, lg, 10, 1)
	if _, err := lg.Compact(t.Context(), "agent0"); !errors.Is(err, eventlog.ErrInvalid) {
		t.Fatalf("compact with a view without AgentRows: %v, want ErrInvalid", err)
	}
	if _, err := lg.Compact(context.Background(), "no.such"); !errors.Is(err, eventlog.ErrInvalid) {
		t.Fatalf("compact of a bad agent id: %v", err)
	}
}
