package eventlog_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/nats-io/nats-server/v2/server"
)

// totalled is the compactable counter with a row over every agent,
// "total": the sum of the agents' counts, kept by Apply and by
// RowsChanged.
func totalled() eventlog.Projection {
	p := compactableCounter()
	p.Name = "totalled"
	apply := p.Apply
	add := func(b *eventlog.Batch, d int) error {
		v, err := b.Get([]byte("total"))
		if err != nil && !errors.Is(err, eventlog.ErrNotFound) {
			return err
		}
		n, _ := strconv.Atoi(string(v))
		return b.Set([]byte("total"), []byte(strconv.Itoa(n+d)))
	}
	p.Apply = func(b *eventlog.Batch, e eventlog.Event) error {
		if err := apply(b, e); err != nil || e.Type == eventlog.TypeSnapshot {
			return err
		}
		return add(b, 1)
	}
	p.RowsChanged = func(b *eventlog.Batch, agent string, removed, added []eventlog.KV) error {
		for _, c := range []struct {
			rows []eventlog.KV
			sign int
		}{{removed, -1}, {added, 1}} {
			for _, kv := range c.rows {
				if string(kv.Key) == "n/"+agent {
					n, _ := strconv.Atoi(string(kv.Value))
					if err := add(b, c.sign*n); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	return p
}

func openTotalled(t *testing.T, s *server.Server) *eventlog.Log {
	t.Helper()
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{})
	pr, err := lg.NewProjector(totalled())
	if err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunProjector(t, pr)
	return lg
}

// checkTotal waits for lg's view and checks that its total is the sum of
// its agents' counts, and want.
func checkTotal(t *testing.T, lg *eventlog.Log, want int, when string) {
	t.Helper()
	last, err := lg.LastSeq(t.Context(), eventlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		c, err := eventlog.StoredCursor(lg, "totalled")
		if err != nil {
			t.Fatal(err)
		}
		if c >= last {
			break
		}
		if t.Context().Err() != nil {
			t.Fatal("the view never caught up")
		}
	}
	rows := dump(t, lg, "totalled")
	sum := 0
	for k, v := range rows {
		if strings.HasPrefix(k, "n/") {
			n, _ := strconv.Atoi(v)
			sum += n
		}
	}
	if total, _ := strconv.Atoi(rows["total"]); total != sum || total != want {
		t.Fatalf("%s: total %d, the agents' counts sum to %d, want %d", when, total, sum, want)
	}
}

// TestRowsChangedKeepsTotals: a view's row over every agent stays the sum
// of the agents' rows when a snapshot replaces an agent's rows and when a
// tombstone removes them, live and rebuilt from the log (where the
// compacted history is gone and only the snapshot gives its rows).
func TestRowsChangedKeepsTotals(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := openTotalled(t, s)
	appendN(t, lg, 300, 3) // 100 each
	checkTotal(t, lg, 300, "live")
	if _, err := lg.Compact(t.Context(), "agent0"); err != nil {
		t.Fatal(err)
	}
	if _, err := lg.Append(t.Context(), eventlog.Event{Agent: "agent0", Type: "tick", Data: []byte(`"more"`)}); err != nil {
		t.Fatal(err)
	}
	checkTotal(t, lg, 301, "after a compaction")
	if _, err := lg.Delete(t.Context(), "agent1"); err != nil {
		t.Fatal(err)
	}
	checkTotal(t, lg, 201, "after a deletion")
	checkTotal(t, openTotalled(t, s), 201, "rebuilt")
}
