package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/eventlog"
)

// Fork scenario parameters.
const (
	// forkSmall and forkLarge are the parents' histories, in events (not
	// scaled up by -n: the target compares these two sizes; below -n 1, a
	// smoke run, the large one shrinks to no less than 10x the small).
	forkSmall = 100
	forkLarge = 10_000
	// forkRounds is how many forks of each parent are timed, alternating
	// (scaled by -n, at least 2).
	forkRounds = 20
	// forkTarget: a fork of the large parent within 2x of one of the small.
	forkTarget = 1 / 2.0
	// forkBatch is how many events one AppendBatch of the fill holds.
	forkBatch = 500
)

// forkScenario measures what a fork costs as its parent's history grows:
// one agentd (local model at full speed, compaction off so the histories
// stay as long as they were made), one real chat turn recorded as a
// template (7 events, 2 messages with the local model), and two parents
// whose histories are that turn's events over and over with fresh ids,
// appended straight to the log: forkSmall and forkLarge events. Then
// forkRounds forks of each, alternating, each the fork verb's round trip
// over NATS (routed, the parent and the cut read from the views, the
// agent.forked event appended, and the views' apply of it awaited). The
// figure is the median fork of the large parent against the small's.
func forkScenario(ctx context.Context, env *Env) (res Result, err error) {
	_, nc, stop, err := env.runAgentd(ctx, "--local-rate", "-1", "--log-level", "warn", "--compact-events", "-1")
	if err != nil {
		return Result{}, err
	}
	defer func() { err = errors.Join(err, stop()) }()
	dir, err := env.TempDir()
	if err != nil {
		return Result{}, err
	}
	lg, err := eventlog.Open(ctx, eventlog.Config{Conn: nc, Dir: dir + "/bench-pebble"})
	if err != nil {
		return Result{}, fmt.Errorf("bench: %w", err)
	}
	defer lg.Close()

	bigN := forkLarge
	if env.cfg.Scale < 1 {
		bigN = max(10*forkSmall, env.Count(forkLarge, forkLarge))
	}
	tmpl, err := forkTemplate(ctx, nc, lg)
	if err != nil {
		return Result{}, fmt.Errorf("template turn: %w", err)
	}
	msgs := map[int]int{}
	for _, size := range []int{forkSmall, bigN} {
		if msgs[size], err = fillForkParent(ctx, lg, forkParent(size), tmpl, size); err != nil {
			return Result{}, fmt.Errorf("fill a parent of %d events: %w", size, err)
		}
	}
	var small, large []time.Duration
	fork := func(size int, lat *[]time.Duration, round int) error {
		body, _ := json.Marshal(map[string]string{"to": fmt.Sprintf("fork-%d-%d", size, round)})
		began := time.Now()
		msg, err := nc.RequestWithContext(ctx, "forever.cmd."+forkParent(size)+".fork", body)
		took := time.Since(began)
		if err != nil {
			return fmt.Errorf("fork: %w", err)
		}
		if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
			return fmt.Errorf("fork: %s %s", code, msg.Header.Get("Nats-Service-Error"))
		}
		var rep struct{ Messages int }
		if json.Unmarshal(msg.Data, &rep) != nil || rep.Messages != msgs[size] {
			return fmt.Errorf("fork of %d events: reply %s, want %d messages", size, msg.Data, msgs[size])
		}
		if round >= 0 {
			*lat = append(*lat, took)
		}
		return nil
	}
	// A warm-up fork of each, untimed.
	if err := errors.Join(fork(forkSmall, nil, -1), fork(bigN, nil, -2)); err != nil {
		return Result{}, fmt.Errorf("warm up: %w", err)
	}
	if err := alternate(max(2, env.Count(forkRounds, forkRounds)),
		func(r int) error { return fork(forkSmall, &small, r) },
		func(r int) error { return fork(bigN, &large, r) }); err != nil {
		return Result{}, err
	}
	ms := func(lat []time.Duration, p float64) float64 { return millis(percentile(lat, p)) }
	env.Logger.Info("fork: done", "small messages", msgs[forkSmall], "large messages", msgs[bigN],
		"small p50 ms", ms(small, 50), "large p50 ms", ms(large, 50))
	base := fmt.Sprintf("parent of %s events (%d messages)", sizeLabel(forkSmall), msgs[forkSmall])
	return Result{Rows: []Row{
		{Figure: fmt.Sprintf("p50 ms fork, parent of %s events (%d messages)", sizeLabel(bigN), msgs[bigN]), Value: ms(large, 50),
			Baseline: base, BaselineValue: ms(small, 50), LowerIsBetter: true, Target: forkTarget, TargetNote: "within 2x"},
		{Figure: fmt.Sprintf("p90 ms fork, parent of %s events", sizeLabel(bigN)), Value: ms(large, 90),
			Baseline: base, BaselineValue: ms(small, 90), LowerIsBetter: true},
	}}, nil
}

func forkParent(size int) string { return fmt.Sprintf("fork-parent-%d", size) }

// forkTemplate runs one chat turn on agent fork-template and returns its
// events once it ended.
func forkTemplate(ctx context.Context, nc *nats.Conn, lg *eventlog.Log) ([]eventlog.Event, error) {
	const agent = "fork-template"
	msg, err := nc.RequestWithContext(ctx, "forever.cmd."+agent+".chat", []byte(`{"text":"Tell me about forks in the road."}`))
	if err != nil {
		return nil, err
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
		return nil, fmt.Errorf("chat: %s %s", code, msg.Header.Get("Nats-Service-Error"))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		evs, err := lg.Read(ctx, eventlog.Filter{Agent: agent}, 0, 0)
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			if e.Type == "turn.completed" {
				return evs, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, errors.New("the turn did not complete within 30s")
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// fillForkParent appends tmpl's events for agent over and over, each copy
// with its own ids, until the agent has n events, and returns how many
// messages they hold.
func fillForkParent(ctx context.Context, lg *eventlog.Log, agent string, tmpl []eventlog.Event, n int) (int, error) {
	var ids []string
	for _, e := range tmpl {
		if e.Type != "turn.started" {
			continue
		}
		var t map[string]any
		if err := json.Unmarshal(e.Data, &t); err != nil {
			return 0, err
		}
		for _, k := range []string{"requestId", "streamId", "messageId", "assistantMessageId", "fiberId"} {
			if s, ok := t[k].(string); ok && s != "" {
				ids = append(ids, s)
			}
		}
	}
	var batch []eventlog.Event
	msgs := 0
	for i := range n {
		e := tmpl[i%len(tmpl)]
		data := e.Data
		for _, id := range ids {
			data = bytes.ReplaceAll(data, []byte(id), fmt.Appendf(nil, "%s-%d", id, i/len(tmpl)))
		}
		// At record format 8 a turn.completed carries the assistant
		// message: count what it stands for.
		for _, part := range chat.SplitEnd(eventlog.Event{Type: e.Type, Data: data}) {
			if part.Type == "turn.started" || part.Type == "message.appended" {
				msgs++
			}
		}
		batch = append(batch, eventlog.Event{Agent: agent, Type: e.Type, Data: data})
		if len(batch) == forkBatch || i == n-1 {
			if _, err := lg.AppendBatch(ctx, batch); err != nil {
				return 0, err
			}
			batch = batch[:0]
		}
	}
	return msgs, nil
}
