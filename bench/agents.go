package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/forever-agents/forever/agents"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

// Agents-list scenario parameters.
const (
	agentsCount  = 10000 // agents listed (before -n)
	agentsUsers  = 100   // users: a user's page holds agentsCount/agentsUsers agents
	agentsPage   = 100   // agents per page
	agentsRounds = 4     // walks through every page, per series (alternated)
	agentsEvents = 40000 // events of the rebuild figure (before -n)
)

var agentsTypes = agents.Types{Registered: []string{"chat", "steps"}, Default: "chat"}

// agentsList measures the listing of agentsCount agents (GET /v1/agents,
// forever.list) from the agents view, and what the view costs the
// follower:
//
//   - a page of agentsPage agents, walking every page with its cursor,
//     against offset paging over the same view (each page scans the rows
//     before it, as LIMIT/OFFSET does);
//   - one user's page through the user index, against the same page
//     filtered from every row;
//   - rebuilding agentd's views of the events stream (runs, chat) with the
//     agents view, against without it, over chat turns.
func agentsList(ctx context.Context, env *Env) (Result, error) {
	lg, release, err := env.OpenLog(ctx)
	if err != nil {
		return Result{}, err
	}
	defer release()
	n := max(agentsPage*2, env.Count(agentsCount, agentsCount))
	f, err := lg.NewFollower()
	if err != nil {
		return Result{}, err
	}
	if err := f.Add(agents.Projection()); err != nil {
		return Result{}, err
	}
	if err := fillAgents(ctx, lg, n); err != nil {
		return Result{}, fmt.Errorf("fill: %w", err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Run(rctx) }()
	defer func() { cancel(); <-done }()
	last, err := lg.LastSeq(ctx, eventlog.Filter{})
	if err != nil {
		return Result{}, err
	}
	if err := f.WaitFor(ctx, last); err != nil {
		return Result{}, err
	}
	raw, err := lg.View(agents.ProjectionName)
	if err != nil {
		return Result{}, err
	}
	v := agents.NewView(raw)

	var pages, offset, byUser, scanUser []time.Duration
	err = alternate(agentsRounds,
		func(int) error { return walkPages(v, n, &pages) },
		func(int) error { return walkOffsets(raw, n, &offset) },
		func(round int) error {
			return timeIt(&byUser, func() error {
				p, err := v.List(agents.Query{User: fmt.Sprintf("u%d", round%agentsUsers), Limit: agentsPage}, agentsTypes)
				if err == nil && len(p.Agents) == 0 {
					err = errors.New("a user's page is empty")
				}
				return err
			})
		},
		func(round int) error {
			return timeIt(&scanUser, func() error { return scanForUser(raw, fmt.Sprintf("u%d", round%agentsUsers)) })
		},
	)
	if err != nil {
		return Result{}, err
	}
	size := countLabel(n) + " agents"
	rows := []Row{}
	for _, p := range []float64{50, 99} {
		rows = append(rows, Row{
			Figure: fmt.Sprintf("p%.0f us page of %d, %s", p, agentsPage, size), Value: micros(percentile(pages, p)), LowerIsBetter: true,
			Baseline: "offset paging of the view", BaselineValue: micros(percentile(offset, p)),
		})
	}
	rows = append(rows, Row{
		Figure: fmt.Sprintf("p50 us one user's page (%d of %s)", n/agentsUsers, size), Value: micros(percentile(byUser, 50)), LowerIsBetter: true,
		Baseline: "every row filtered", BaselineValue: micros(percentile(scanUser, 50)),
	})
	rebuild, err := agentsRebuild(ctx, env)
	return Result{Rows: append(rows, rebuild...)}, err
}

// fillAgents appends, per agent, its user context and a fiber that ran.
func fillAgents(ctx context.Context, lg *eventlog.Log, n int) error {
	var evs []eventlog.Event
	for i := range n {
		id := fmt.Sprintf("a%06d", i)
		if i%3 == 0 {
			id = "steps:" + id
		}
		user, tags := fmt.Sprintf("u%d", i%agentsUsers), []string{fmt.Sprintf("t%d", i%7)}
		meta, err := eventlog.NewEvent(id, agents.EventMeta, agents.MetaPatch{User: &user, Tags: &tags, Metadata: json.RawMessage(`{"plan":"pro"}`)})
		if err != nil {
			return err
		}
		evs = append(evs, meta,
			eventlog.Event{Agent: id, Type: fiber.EventStarted, Data: json.RawMessage(`{"id":"f` + id + `","name":"x"}`)},
			eventlog.Event{Agent: id, Type: fiber.EventCompleted, Data: json.RawMessage(`{"id":"f` + id + `"}`)})
		if len(evs) >= 900 || i == n-1 {
			if _, err := lg.AppendBatch(ctx, evs); err != nil {
				return err
			}
			evs = evs[:0]
		}
	}
	return nil
}

// countLabel is n as a figure shows it: 40k, or 400.
func countLabel(n int) string {
	if n >= 1000 {
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func timeIt(lat *[]time.Duration, f func() error) error {
	t := time.Now()
	err := f()
	*lat = append(*lat, time.Since(t))
	return err
}

// walkPages lists every agent page by page with the cursor.
func walkPages(v *agents.View, n int, lat *[]time.Duration) error {
	q := agents.Query{Limit: agentsPage}
	seen := 0
	for {
		var p agents.Page
		if err := timeIt(lat, func() (err error) { p, err = v.List(q, agentsTypes); return err }); err != nil {
			return err
		}
		seen += len(p.Agents)
		if p.Next == "" {
			break
		}
		q.Cursor = p.Next
	}
	if seen != n {
		return fmt.Errorf("listed %d agents of %d", seen, n)
	}
	return nil
}

// walkOffsets lists every page by offset: each page scans the view's rows
// from the first, skipping those of the pages before it, and decodes its
// own.
func walkOffsets(raw *eventlog.View, n int, lat *[]time.Duration) error {
	for off := 0; off < n; off += agentsPage {
		err := timeIt(lat, func() error {
			i, got := 0, 0
			for kv, err := range raw.Scan([]byte("a/")) {
				if err != nil {
					return err
				}
				if i++; i <= off {
					continue
				}
				var e agents.Entry
				if err := json.Unmarshal(kv.Value, &e); err != nil {
					return err
				}
				if got++; got == agentsPage {
					break
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// scanForUser reads every row and keeps the user's first page.
func scanForUser(raw *eventlog.View, user string) error {
	got := 0
	for kv, err := range raw.Scan([]byte("a/")) {
		if err != nil {
			return err
		}
		var e struct{ User string }
		if err := json.Unmarshal(kv.Value, &e); err != nil {
			return err
		}
		if e.User == user {
			if got++; got == agentsPage {
				break
			}
		}
	}
	if got == 0 {
		return errors.New("the user has no agent")
	}
	return nil
}

// agentsRebuild times rebuilding the runs and chat views from an empty
// Pebble with the agents view and without it, over chat turns.
func agentsRebuild(ctx context.Context, env *Env) ([]Row, error) {
	cfg, err := env.LogConfig()
	if err != nil {
		return nil, err
	}
	defer env.DropLog(cfg)
	n := max(7, env.Count(agentsEvents, agentsEvents))
	if err := fillTurns(ctx, cfg, n); err != nil {
		return nil, err
	}
	var with, without series
	round := func(withAgents bool, s *series) func(int) error {
		return func(int) error {
			took, events, err := rebuildWith(ctx, env, cfg, withAgents)
			s.elapsed += took
			s.ops += int(events)
			return err
		}
	}
	if err := alternate(viewsRounds, round(true, &with), round(false, &without)); err != nil {
		return nil, err
	}
	return []Row{{
		Figure: fmt.Sprintf("events/s rebuild of runs+chat views with the agents view, %s events", countLabel(n)), Value: with.rate(),
		Baseline: "without the agents view", BaselineValue: without.rate(),
	}}, nil
}

func rebuildWith(ctx context.Context, env *Env, cfg eventlog.Config, withAgents bool) (time.Duration, eventlog.Seq, error) {
	var err error
	if cfg.Dir, err = env.TempDir(); err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(cfg.Dir)
	start := time.Now()
	lg, err := eventlog.Open(ctx, cfg)
	if err != nil {
		return 0, 0, err
	}
	defer lg.Close()
	want, err := lg.LastSeq(ctx, eventlog.Filter{})
	if err != nil {
		return 0, 0, err
	}
	f, err := lg.NewFollower()
	if err != nil {
		return 0, 0, err
	}
	if _, _, err := chat.AddStore(lg, f); err != nil {
		return 0, 0, err
	}
	if _, err := fiber.AddTable(lg, f); err != nil {
		return 0, 0, err
	}
	if withAgents {
		if err := f.Add(agents.Projection()); err != nil {
			return 0, 0, err
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Run(rctx) }()
	err = f.WaitFor(ctx, want)
	took := time.Since(start)
	cancel()
	if rerr := <-done; err == nil && rerr != nil && !errors.Is(rerr, context.Canceled) {
		err = rerr
	}
	names := f.Names()
	if withAgents && !slices.Contains(names, agents.ProjectionName) {
		err = errors.Join(err, errors.New("the agents view was not rebuilt"))
	}
	return took, want, err
}
