package compaction_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/compaction"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/keepalive"
	"github.com/nats-io/nats-server/v2/server"
)

// views are the names of the views compared before and after compaction:
// every view of the events stream agentd runs but the stats view, which a
// snapshot resets.
var views = []string{
	fiber.RunsName, chat.MessagesProjectionName, chat.StateProjectionName, chat.UsageProjectionName,
	chat.InterruptsProjectionName, chat.TurnsProjectionName, chat.ContextProjectionName, keepalive.ProjectionName,
}

// node is one process's log with agentd's views of the events stream on
// one Follower, over a fresh Pebble directory.
type node struct {
	lg    *eventlog.Log
	views *eventlog.Follower
	table *fiber.Table
}

func open(t *testing.T, s *server.Server) *node { return openLog(t, s, eventlog.Config{}) }

func openLog(t *testing.T, s *server.Server, cfg eventlog.Config) *node {
	t.Helper()
	lg := eventlogtest.OpenOn(t, s, cfg)
	f, err := lg.NewFollower()
	if err != nil {
		t.Fatal(err)
	}
	table, err := fiber.AddTable(lg, f)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []eventlog.Projection{chat.MessagesProjection(), chat.StateProjection(), chat.UsageProjection(),
		chat.InterruptsProjection(), chat.TurnsProjection(), chat.ContextProjection(), compaction.View()} {
		if err := f.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := keepalive.NewScheduler(keepalive.SchedulerConfig{Log: lg, Views: f,
		Fire: func(context.Context, keepalive.Schedule) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunFollower(t, f)
	return &node{lg: lg, views: f, table: table}
}

func (n *node) caughtUp(t *testing.T) {
	t.Helper()
	last, err := n.lg.LastSeq(t.Context(), eventlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.views.WaitFor(t.Context(), last); err != nil {
		t.Fatal(err)
	}
}

// dump returns every row of the compared views.
func (n *node) dump(t *testing.T) map[string]string {
	t.Helper()
	n.caughtUp(t)
	out := map[string]string{}
	for _, name := range views {
		v, err := n.lg.View(name)
		if err != nil {
			t.Fatal(err)
		}
		for kv, err := range v.Scan(nil) {
			if err != nil {
				t.Fatal(err)
			}
			out[name+"|"+string(kv.Key)] = string(kv.Value)
		}
	}
	return out
}

func sameRows(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: row %q = %q, want %q", what, k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: extra row %q", what, k)
		}
	}
}

const agent = "worker:1"

// history writes a long history for agent: finished fibers with steps and
// stashes, one fiber left running (orphaned) with completed ops, chat
// messages, state and usage, and schedules set, fired and cancelled. It
// returns the orphan's step keys and how often their functions ran.
func history(t *testing.T, n *node, finished int) []string {
	t.Helper()
	ctx := t.Context()
	r, err := fiber.New(fiber.Config{Log: n.lg, Table: n.table, Agent: agent})
	if err != nil {
		t.Fatal(err)
	}
	for i := range finished {
		err := r.Run(ctx, "done", func(ctx context.Context, f *fiber.Fiber) error {
			for j := range 3 {
				if _, err := fiber.StepJSON(ctx, fmt.Sprintf("s%d", j), func(context.Context, string) (int, error) { return i * j, nil }); err != nil {
					return err
				}
				if err := f.Stash(ctx, map[string]int{"i": i, "j": j}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	keys := []string{"fetch", "think", "write"}
	block := make(chan struct{})
	reached := make(chan struct{})
	if _, err := r.Go(ctx, "orphan", func(ctx context.Context, f *fiber.Fiber) error {
		for i, k := range keys {
			if _, err := fiber.StepJSON(ctx, k, func(context.Context, string) (string, error) { return "result of " + k, nil }); err != nil {
				return err
			}
			if err := f.Stash(ctx, map[string]int{"done": i + 1}); err != nil {
				return err
			}
		}
		close(reached)
		select {
		case <-block:
		case <-ctx.Done():
		}
		return ctx.Err()
	}); err != nil {
		t.Fatal(err)
	}
	<-reached
	// A crash: the process goes away with the fiber running.
	r.Close()

	base := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	var evs []eventlog.Event
	add := func(typ string, v any) {
		e, err := eventlog.NewEvent(agent, typ, v)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e)
	}
	for i := range finished {
		add(chat.EventMessageAppended, chat.Message{ID: fmt.Sprintf("m%d", i), Role: "user",
			Parts: []chat.Part{{Type: "text", Text: fmt.Sprintf("message %d", i)}}, CreatedAt: base.Add(time.Duration(i) * time.Second)})
		add(chat.EventStateSet, map[string]any{"version": i + 1, "value": map[string]int{"n": i}})
		add(chat.EventUsageRecorded, map[string]any{"requestId": fmt.Sprintf("r%d", i), "input": i, "output": 2 * i})
		add(keepalive.EventSet, keepalive.Schedule{ID: fmt.Sprintf("s%d", i%7), Agent: agent, Callback: "tick",
			Kind: keepalive.KindAt, At: base.Add(time.Hour), NextAt: base.Add(time.Hour + time.Duration(i)*time.Minute), CreatedAt: base})
		if i%7 == 3 {
			add(keepalive.EventCancelled, keepalive.CancelData{ID: "s3"})
		}
	}
	for len(evs) > 0 {
		k := min(len(evs), 500)
		if _, err := n.lg.AppendBatch(ctx, evs[:k]); err != nil {
			t.Fatal(err)
		}
		evs = evs[k:]
	}
	return keys
}

// TestCompactionKeepsEveryView: an agent with a long history of fibers,
// ops, stashes, messages, state, usage and schedules is compacted. Every
// view's rows are the same after it, and in a view rebuilt from an empty
// Pebble; the log holds the snapshot alone; the orphaned fiber, recovered
// from the rebuilt views, gets its ops' cached results without running
// them again.
func TestCompactionKeepsEveryView(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	n := open(t, s)
	keys := history(t, n, 400)
	before := n.dump(t)
	stored, err := n.lg.Read(t.Context(), eventlog.Filter{Agent: agent}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}

	c, err := compaction.New(compaction.Config{Log: n.lg, Events: 100})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := c.Stats(agent); st.Events != int64(len(stored)) {
		t.Fatalf("stats: %d events, the log holds %d", st.Events, len(stored))
	}
	c.Sweep(t.Context())
	after, err := n.lg.Read(t.Context(), eventlog.Filter{Agent: agent}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) == 0 || after[0].Type != eventlog.TypeSnapshot || len(after) >= len(stored)/10 {
		t.Fatalf("after compaction the agent has %d events (first %q), before %d", len(after), after[0].Type, len(stored))
	}
	t.Logf("compacted %d events into %d", len(stored), len(after))
	sameRows(t, "live views after compaction", n.dump(t), before)
	if st, _ := c.Stats(agent); st.Events != int64(len(after)) {
		t.Errorf("stats after compaction: %d events, want the snapshot's %d", st.Events, len(after))
	}

	rebuilt := open(t, s)
	sameRows(t, "views rebuilt from the compacted log", rebuilt.dump(t), before)

	// Recovery from the rebuilt views: the orphan resumes from its last
	// stash and its steps come from the snapshot's ops.
	var ran atomic.Int32
	got := map[string]string{}
	resumed := make(chan error, 1)
	var r *fiber.Runner
	r, err = fiber.New(fiber.Config{Log: rebuilt.lg, Table: rebuilt.table, Agent: agent,
		Hooks: fiber.Hooks{OnFiberRecovered: func(ctx context.Context, rec fiber.Recovered) error {
			var st map[string]int
			if err := rec.Decode(&st); err != nil || st["done"] != len(keys) {
				return fmt.Errorf("recovered snapshot %v: %v", st, err)
			}
			return r.GoResume(ctx, rec, func(ctx context.Context, f *fiber.Fiber) error {
				for _, k := range keys {
					v, err := fiber.StepJSON(ctx, k, func(context.Context, string) (string, error) {
						ran.Add(1)
						return "ran again", nil
					})
					if err != nil {
						resumed <- err
						return err
					}
					got[k] = v
				}
				resumed <- nil
				return nil
			})
		}}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-resumed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the orphan was not recovered")
	}
	if ran.Load() != 0 {
		t.Errorf("%d completed steps ran again after compaction", ran.Load())
	}
	for _, k := range keys {
		if got[k] != "result of "+k {
			t.Errorf("step %s = %q, want its cached result", k, got[k])
		}
	}
}

// recorded is the events-stream part of a recorded history: the chat
// golden histories (real turns: tools, approvals, crashes, recoveries) and
// the fiber package's.
func recorded(t *testing.T) map[string][]eventlog.Event {
	t.Helper()
	out := map[string][]eventlog.Event{}
	files, _ := filepath.Glob("../chat/testdata/golden/*.jsonl")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(data)) {
			var r struct {
				Subject string          `json:"subject"`
				ID      string          `json:"id"`
				Type    string          `json:"type"`
				Data    json.RawMessage `json:"data"`
			}
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			agent, ok := strings.CutPrefix(r.Subject, "forever.evt.")
			if !ok {
				continue // a chunk
			}
			out[filepath.Base(file)] = append(out[filepath.Base(file)], eventlog.Event{Agent: agent, Type: r.Type, Data: r.Data})
		}
	}
	data, err := os.ReadFile("../fiber/testdata/history.json")
	if err != nil {
		t.Fatal(err)
	}
	var evs []eventlog.Event
	if err := json.Unmarshal(data, &evs); err != nil {
		t.Fatal(err)
	}
	for i := range evs {
		evs[i].ID, evs[i].Time = "", time.Time{}
	}
	out["fiber-history"] = evs
	// A fixed time per event, so two logs of the same history hold the
	// same rows (a turn's startedAt is its event's time).
	base := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	for _, evs := range out {
		for i := range evs {
			evs[i].Time = base.Add(time.Duration(i) * time.Millisecond)
		}
	}
	if len(out) < 10 {
		t.Fatalf("%d recorded histories", len(out))
	}
	return out
}

// TestCompactionOfRecordedHistories: each recorded history is appended in
// two halves, every agent compacted after each. After the first half the
// views equal those of the same events uncompacted; after each compaction
// a rebuild from an empty Pebble equals the live views.
func TestCompactionOfRecordedHistories(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	n := 0
	for name, evs := range recorded(t) {
		t.Run(name, func(t *testing.T) {
			n++
			cfg := func(k int) eventlog.Config {
				return eventlog.Config{Prefix: fmt.Sprintf("h%d%d", n, k), EventsStream: fmt.Sprintf("EV_%d_%d", n, k), ChunksStream: fmt.Sprintf("CH_%d_%d", n, k)}
			}
			live, ref := openLog(t, s, cfg(0)), openLog(t, s, cfg(1))
			agents := map[string]bool{}
			for _, e := range evs {
				agents[e.Agent] = true
			}
			half := len(evs) / 2
			for round, part := range [][]eventlog.Event{evs[:half], evs[half:]} {
				for _, e := range part {
					if _, err := live.lg.Append(t.Context(), e); err != nil {
						t.Fatal(err)
					}
					if round == 0 {
						if _, err := ref.lg.Append(t.Context(), e); err != nil {
							t.Fatal(err)
						}
					}
				}
				for a := range agents {
					if _, err := live.lg.Compact(t.Context(), a); err != nil && !errors.Is(err, eventlog.ErrNothingToCompact) {
						t.Fatalf("compact %s: %v", a, err)
					}
				}
				rows := live.dump(t)
				if round == 0 {
					sameRows(t, "compacted against uncompacted", rows, ref.dump(t))
				}
				c := cfg(0)
				c.Bind = true
				sameRows(t, fmt.Sprintf("rebuilt after compaction %d", round+1), openLog(t, s, c).dump(t), rows)
			}
		})
	}
}
