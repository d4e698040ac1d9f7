package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/nats-io/nats.go/jetstream"
)

// Compaction scenario parameters.
const (
	compactAgents = 64
	compactBlock  = 9   // events of one block of an agent's history
	compactMsgs   = 10  // one chat message every this many blocks
	compactPB     = 100 // blocks per AppendBatch
)

// compactSizes are the log lengths, in events, before -n scales them.
var compactSizes = []int{10_000, 100_000, 1_000_000}

// compactionScenario measures what compaction buys an agent that lives
// long: it fills the events stream with the history of compactAgents
// agents, each running one long fiber that stashes over and over, short
// fibers with one completed step each, and now and then a chat message
// (all kept: messages are never compacted away). Then, per log length:
//
//   - rebuild from an empty Pebble of every view agentd keeps, timed from
//     opening the Log until the views are ready, on the log as filled
//     (baseline) and after every agent was compacted (ours);
//   - the events stream's stored bytes, before and after;
//   - the time to compact every agent (Log.Compact, one agent after the
//     other), next to the uncompacted rebuild.
func compactionScenario(ctx context.Context, env *Env) (Result, error) {
	var res Result
	for _, size := range compactSizes {
		n := max(compactBlock*compactAgents, env.Count(size, size))
		rows, err := compactionSize(ctx, env, n)
		res.Rows = append(res.Rows, rows...)
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

func compactionSize(ctx context.Context, env *Env, n int) ([]Row, error) {
	cfg, err := env.LogConfig()
	if err != nil {
		return nil, err
	}
	defer env.DropLog(cfg)
	if err := fillHistory(ctx, cfg, n); err != nil {
		return nil, fmt.Errorf("fill: %w", err)
	}
	bytesBefore, err := streamBytes(ctx, cfg)
	if err != nil {
		return nil, err
	}
	before, _, _, err := rebuildViews(ctx, env, cfg, true, false)
	if err != nil {
		return nil, fmt.Errorf("rebuild before compaction: %w", err)
	}
	compactTook, err := compactAll(ctx, env, cfg)
	if err != nil {
		return nil, fmt.Errorf("compact: %w", err)
	}
	bytesAfter, err := streamBytes(ctx, cfg)
	if err != nil {
		return nil, err
	}
	after, _, _, err := rebuildViews(ctx, env, cfg, true, false)
	if err != nil {
		return nil, fmt.Errorf("rebuild after compaction: %w", err)
	}
	size := sizeLabel(n)
	const uncompacted = "the same history uncompacted"
	return []Row{
		{Figure: "ms rebuild " + size, Value: millis(after), LowerIsBetter: true, Baseline: uncompacted, BaselineValue: millis(before)},
		{Figure: "MiB stored " + size, Value: float64(bytesAfter) / (1 << 20), LowerIsBetter: true, Baseline: uncompacted, BaselineValue: float64(bytesBefore) / (1 << 20)},
		{Figure: fmt.Sprintf("ms compact %d agents %s", compactAgents, size), Value: millis(compactTook), LowerIsBetter: true,
			Baseline: "rebuild of the uncompacted log", BaselineValue: millis(before)},
	}, nil
}

// fillHistory appends n events (whole blocks) of compactAgents agents.
func fillHistory(ctx context.Context, cfg eventlog.Config, n int) error {
	lg, err := eventlog.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer lg.Close()
	blocks := n / compactBlock
	evs := make([]eventlog.Event, 0, compactBlock*compactPB)
	for b := range blocks {
		evs = append(evs, historyBlock(fmt.Sprintf("h%d", b%compactAgents), b/compactAgents)...)
		if len(evs) == cap(evs) || b == blocks-1 {
			if _, err := lg.AppendBatch(ctx, evs); err != nil {
				return err
			}
			evs = evs[:0]
		}
	}
	return nil
}

// historyBlock is block k of agent's history: the long fiber (started in
// block 0) stashes four times, one short fiber runs one step and ends, and
// every compactMsgs blocks a user message is appended (in place of the
// last stash, so a block is always compactBlock events).
func historyBlock(agent string, k int) []eventlog.Event {
	ev := func(typ, data string) eventlog.Event {
		return eventlog.Event{Agent: agent, Type: typ, Data: json.RawMessage(data)}
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(k) * time.Second).Format(time.RFC3339Nano)
	short := fmt.Sprintf("f%d", k)
	evs := make([]eventlog.Event, 0, compactBlock)
	if k == 0 {
		evs = append(evs, ev("fiber.started", fmt.Sprintf(`{"id":"long","name":"long","createdAt":%q}`, now)))
	} else {
		evs = append(evs, ev("fiber.stashed", fmt.Sprintf(`{"id":"long","snapshot":{"step":%d,"phase":0}}`, k)))
	}
	for i := 1; i <= 3; i++ {
		evs = append(evs, ev("fiber.stashed", fmt.Sprintf(`{"id":"long","snapshot":{"step":%d,"phase":%d}}`, k, i)))
	}
	evs = append(evs,
		ev("fiber.started", fmt.Sprintf(`{"id":%q,"name":"short","createdAt":%q}`, short, now)),
		ev("op.started", fmt.Sprintf(`{"fiber":%q,"opId":"o%d","key":"fetch"}`, short, k)),
		ev("op.completed", fmt.Sprintf(`{"fiber":%q,"opId":"o%d","result":{"status":200,"body":"result %d"}}`, short, k, k)),
		ev("fiber.completed", fmt.Sprintf(`{"id":%q}`, short)),
	)
	if k%compactMsgs == 0 {
		evs = append(evs, ev("message.appended", fmt.Sprintf(`{"id":"m%d","role":"user","parts":[{"type":"text","text":"note %d"}],"createdAt":%q}`, k, k, now)))
	} else {
		evs = append(evs, ev("fiber.stashed", fmt.Sprintf(`{"id":"long","snapshot":{"step":%d,"phase":4}}`, k)))
	}
	return evs
}

// compactAll opens a Log with agentd's views on cfg's streams and compacts
// every agent, one after the other; it returns the time of the
// compactions (the views' catch-up excluded).
func compactAll(ctx context.Context, env *Env, cfg eventlog.Config) (time.Duration, error) {
	var err error
	if cfg.Dir, err = env.TempDir(); err != nil {
		return 0, err
	}
	defer os.RemoveAll(cfg.Dir)
	lg, err := eventlog.Open(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer lg.Close()
	vs, err := openViews(lg, true)
	if err != nil {
		return 0, err
	}
	stop, err := vs.start(ctx)
	if err != nil {
		return 0, err
	}
	defer stop()
	start := time.Now()
	for a := range compactAgents {
		if _, err := lg.Compact(ctx, fmt.Sprintf("h%d", a)); err != nil && !errors.Is(err, eventlog.ErrNothingToCompact) {
			return 0, err
		}
	}
	return time.Since(start), nil
}

func streamBytes(ctx context.Context, cfg eventlog.Config) (uint64, error) {
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return 0, err
	}
	s, err := js.Stream(ctx, cfg.EventsStream)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Bytes, nil
}
