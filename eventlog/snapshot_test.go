package eventlog_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
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
			// Each agent's events take more than one batch of a read.
			const perAgent = 300
			appendN(t, lg, 3*perAgent, 3)
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
			if want := perAgent + 1; crash && len(evs) != want || !crash && (len(evs) != 1 || evs[0].Type != eventlog.TypeSnapshot) {
				t.Fatalf("agent0 has %d events after compaction (crash %v)", len(evs), crash)
			}
			if evs, _ := lg.Read(t.Context(), eventlog.Filter{Agent: "agent1"}, 0, 0); len(evs) != perAgent {
				t.Fatalf("agent1 has %d events, want its %d", len(evs), perAgent)
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
			if a, b := dump(t, lg, "counter"), dump(t, rebuilt, "counter"); !equalMaps(a, b) || a["n/agent0"] != strconv.Itoa(perAgent+1) {
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

// TestCompactionCrash: a process compacting an agent is killed with
// SIGKILL right after its snapshot append, before or during its purge.
// After every kill a view rebuilt from an empty Pebble equals the fold of
// every event ever appended (nothing lost, nothing applied twice), and the
// next compaction leaves the snapshot alone in the agent's log.
func TestCompactionCrash(t *testing.T) {
	if os.Getenv("EVENTLOG_COMPACT_CHILD") != "" {
		return
	}
	if testing.Short() {
		t.Skip("crash test")
	}
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{})
	var all []eventlog.Event
	for round := 0; round <= 6; round++ {
		last := round == 6
		var evs []eventlog.Event
		for i := range 400 {
			evs = append(evs, eventlog.Event{Agent: fmt.Sprintf("agent%d", i%2), Type: "tick", Data: json.RawMessage(strconv.Itoa(len(all) + i))})
		}
		if _, err := lg.AppendBatch(t.Context(), evs); err != nil {
			t.Fatal(err)
		}
		all = append(all, evs...)

		cmd := exec.Command(os.Args[0], "-test.run=^TestCompactionChild$", "-test.v")
		// Even rounds hold the child between its append and its purge, so
		// the kill lands there; odd ones let it purge at once.
		hold := !last && round%2 == 0
		cmd.Env = append(os.Environ(), "EVENTLOG_COMPACT_CHILD=1", "EVENTLOG_NATS="+s.ClientURL(), "EVENTLOG_DIR="+t.TempDir(),
			"EVENTLOG_COMPACT_HOLD="+strconv.FormatBool(hold))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		for sc.Scan() && !strings.Contains(sc.Text(), "child: appended") {
		}
		if !last {
			// Not a synchronisation: the kill lands at a random point.
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
			cmd.Process.Signal(syscall.SIGKILL)
		}
		go func() {
			for sc.Scan() {
			}
		}()
		if err := cmd.Wait(); last && err != nil {
			t.Fatalf("final child: %v", err)
		}
		rebuilt := openCounter(t, s, eventlog.Config{})
		waitAll(t, rebuilt)
		if got, want := dump(t, rebuilt, "counter"), fold(all); !equalMaps(got, want) {
			t.Fatalf("round %d: rebuilt view\n%v\nwant the fold of every event\n%v", round, got, want)
		}
		stored, err := lg.Read(t.Context(), eventlog.Filter{Agent: "agent0"}, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: agent0 holds %d events", round, len(stored))
		if hold && len(stored) < 2 {
			t.Fatalf("round %d: killed before its purge, the child left %d events", round, len(stored))
		}
		if last && (len(stored) != 1 || stored[0].Type != eventlog.TypeSnapshot) {
			t.Fatalf("after the last compaction agent0 holds %d events", len(stored))
		}
	}
}

// TestCompactionChild is the child of TestCompactionCrash: it compacts
// agent0 and says when the snapshot is stored.
func TestCompactionChild(t *testing.T) {
	if os.Getenv("EVENTLOG_COMPACT_CHILD") == "" {
		t.Skip("child of TestCompactionCrash")
	}
	nc, err := nats.Connect(os.Getenv("EVENTLOG_NATS"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	lg, err := eventlog.Open(context.Background(), eventlog.Config{Conn: nc, Dir: filepath.Clean(os.Getenv("EVENTLOG_DIR"))})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	pr, err := lg.NewProjector(compactableCounter())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pr.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventlog.StopCompact(lg, func(point string) error {
		fmt.Println("child: " + point)
		if os.Getenv("EVENTLOG_COMPACT_HOLD") == "true" {
			time.Sleep(time.Minute) // not a synchronisation: the parent kills it here
		}
		return nil
	})
	// A compaction a kill cut off is finished by this one, or this one is
	// a fresh compaction of the new events.
	if _, err := lg.Compact(ctx, "agent0"); err != nil && !errors.Is(err, eventlog.ErrNothingToCompact) {
		t.Fatal(err)
	}
	fmt.Println("child: appended") // also when there was nothing to append
}

// TestSnapshotRowsMigrate: a view that changes its Version reads the rows
// of snapshots stored by the older version through its MigrateRows, and a
// rebuild gives the rows it had; without MigrateRows the part is
// quarantined, naming both versions, and the view misses that agent's
// compacted history rather than reading rows of another schema.
func TestSnapshotRowsMigrate(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := openCounter(t, s, eventlog.Config{})
	appendN(t, lg, 300, 2)
	waitAll(t, lg)
	before := dump(t, lg, "counter")
	if _, err := lg.Compact(t.Context(), "agent0"); err != nil {
		t.Fatal(err)
	}
	v2 := func(migrate bool) (*eventlog.Log, *[]int) {
		var calls []int
		p := compactableCounter()
		p.Version = 2
		if migrate {
			p.MigrateRows = func(agent string, from int, rows []eventlog.KV) ([]eventlog.KV, error) {
				if agent != "agent0" {
					t.Errorf("migrating rows of %s", agent)
				}
				calls = append(calls, from)
				return rows, nil // version 2 keeps version 1's rows
			}
		}
		rebuilt := eventlogtest.OpenOn(t, s, eventlog.Config{})
		pr, err := rebuilt.NewProjector(p)
		if err != nil {
			t.Fatal(err)
		}
		eventlogtest.RunProjector(t, pr)
		waitAll(t, rebuilt)
		return rebuilt, &calls
	}

	migrated, calls := v2(true)
	if got := dump(t, migrated, "counter"); !equalMaps(before, got) {
		t.Fatalf("version 2 rebuilt through MigrateRows:\n%v\nwant\n%v", got, before)
	}
	if len(*calls) != 1 || (*calls)[0] != 1 {
		t.Fatalf("MigrateRows called with %v, want once from version 1", *calls)
	}
	for q, err := range migrated.Quarantine() {
		t.Fatalf("quarantined after a migration: %+v %v", q, err)
	}

	plain, _ := v2(false)
	got := dump(t, plain, "counter")
	if _, ok := got["n/agent0"]; ok || got["n/agent1"] != before["n/agent1"] {
		t.Fatalf("version 2 without MigrateRows: %v", got)
	}
	n := 0
	for q, err := range plain.Quarantine() {
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(q.Error, "version 1") || !strings.Contains(q.Error, "at 2") {
			t.Errorf("quarantined: %+v", q)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("%d parts quarantined, want the snapshot's one", n)
	}
}

// TestCompactDeletesWhatAPurgeLeft: when the purge by subject leaves the
// agent's old events stored (as a crash once undid part of a purge, and
// later purges did not remove them), Compact deletes them one by one, so
// the agent's log is its snapshot and the other agents are untouched.
func TestCompactDeletesWhatAPurgeLeft(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := openCounter(t, s, eventlog.Config{})
	appendN(t, lg, 300, 3)
	waitAll(t, lg)
	before := dump(t, lg, "counter")
	eventlog.SkipPurgeOnce(lg)
	c, err := lg.Compact(t.Context(), "agent0")
	if err != nil {
		t.Fatal(err)
	}
	evs, err := lg.Read(t.Context(), eventlog.Filter{Agent: "agent0"}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Seq != c.Seq || evs[0].Type != eventlog.TypeSnapshot {
		t.Fatalf("agent0 holds %d events after a compaction whose purge removed nothing", len(evs))
	}
	for _, a := range []string{"agent1", "agent2"} {
		if evs, _ := lg.Read(t.Context(), eventlog.Filter{Agent: a}, 0, 0); len(evs) != 100 {
			t.Fatalf("%s holds %d events, want its 100", a, len(evs))
		}
	}
	waitAll(t, lg)
	if after := dump(t, lg, "counter"); !equalMaps(before, after) {
		t.Fatalf("rows changed:\n%v\n%v", before, after)
	}
}

// TestSnapshotRowsReadableFrom: a view whose new Version only adds to its
// rows (RowsReadableFrom) labels its snapshots with the older version, so
// in a rolling upgrade a node of the release before applies a snapshot a
// node of this release compacted, instead of quarantining it and missing
// the agent's compacted history; and a node of this release applies it as
// it is. Without RowsReadableFrom the older node quarantines the part (the
// defect TestUpgrade met when the runs view went to version 2).
func TestSnapshotRowsReadableFrom(t *testing.T) {
	for _, compat := range []bool{true, false} {
		t.Run(fmt.Sprintf("readable=%v", compat), func(t *testing.T) {
			s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
			newer := compactableCounter()
			newer.Version = 2
			if compat {
				newer.RowsReadableFrom = 1
			}
			lg := eventlogtest.OpenOn(t, s, eventlog.Config{})
			pr, err := lg.NewProjector(newer)
			if err != nil {
				t.Fatal(err)
			}
			eventlogtest.RunProjector(t, pr)
			appendN(t, lg, 300, 2)
			waitAll(t, lg)
			before := dump(t, lg, "counter")
			if _, err := lg.Compact(t.Context(), "agent0"); err != nil {
				t.Fatal(err)
			}
			// A node of the release before: the view at version 1.
			older := openCounter(t, s, eventlog.Config{})
			waitAll(t, older)
			quarantined := 0
			for q, err := range older.Quarantine() {
				if err != nil {
					t.Fatal(err)
				}
				quarantined++
				if compat {
					t.Errorf("the older view quarantined %+v", q)
				}
			}
			got := dump(t, older, "counter")
			switch {
			case compat && !equalMaps(before, got):
				t.Fatalf("the older view read the snapshot as\n%v\nwant\n%v", got, before)
			case !compat && quarantined == 0:
				t.Fatal("the older view applied rows labelled with a version it does not know")
			}
			if !compat {
				return
			}
			// A node of this release, rebuilt: it reads the label as is.
			same := eventlogtest.OpenOn(t, s, eventlog.Config{})
			pr, err = same.NewProjector(newer)
			if err != nil {
				t.Fatal(err)
			}
			eventlogtest.RunProjector(t, pr)
			waitAll(t, same)
			if got := dump(t, same, "counter"); !equalMaps(before, got) {
				t.Fatalf("this release rebuilt\n%v\nwant\n%v", got, before)
			}
			for q, err := range same.Quarantine() {
				t.Fatalf("this release quarantined %+v %v", q, err)
			}
		})
	}
}
