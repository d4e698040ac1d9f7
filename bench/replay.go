package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/replay"
	"github.com/nats-io/nats.go/jetstream"
)

// Replay scenario parameters.
const (
	replayRuns      = 4   // full replays per series
	replayStarts    = 200 // Follow starts timed for the first chunk
	replayDeltaSize = 64  // bytes of text per delta chunk
)

// replayScenario stores one chat stream of N chunks (start, text deltas,
// finish) and measures replay.Client.Follow from cursor 0 to the terminal
// chunk, next to a raw JetStream ordered consumer reading the same messages
// without decoding; then the time from calling Follow (from a cursor in the
// middle) to its first chunk, next to a raw ordered consumer's first message.
// Rounds alternate the two.
func replayScenario(ctx context.Context, env *Env) (Result, error) {
	n := env.Count(10000, 10000)
	cfg, err := env.LogConfig()
	if err != nil {
		return Result{}, err
	}
	lg, err := eventlog.Open(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	defer env.DropLog(cfg)
	defer lg.Close()

	const agent, stream = "r1", "s1"
	first, err := fillStream(ctx, lg, agent, stream, n)
	if err != nil {
		return Result{}, fmt.Errorf("fill: %w", err)
	}
	client := replay.NewClient(lg)
	subject := lg.ChunksSubject(agent, stream)
	raw := func(from eventlog.Seq, count int) error {
		cons, err := env.JS.OrderedConsumer(ctx, cfg.ChunksStream, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{subject},
			DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:    uint64(from),
		})
		if err != nil {
			return err
		}
		msgs, err := cons.Messages(jetstream.PullMaxMessages(512))
		if err != nil {
			return err
		}
		defer msgs.Stop()
		for range count {
			if _, err := msgs.Next(jetstream.NextContext(ctx)); err != nil {
				return err
			}
		}
		return nil
	}
	ours := func(after replay.Cursor, count int) error {
		got := 0
		for _, err := range client.Follow(ctx, agent, stream, after) {
			if err != nil {
				return err
			}
			if got++; got == count {
				break
			}
		}
		if got != count {
			return fmt.Errorf("replayed %d chunks, want %d", got, count)
		}
		return nil
	}

	var base, sub series
	err = alternate(replayRuns,
		func(int) error { return base.timed(n, func() error { return raw(first, n) }) },
		func(int) error { return sub.timed(n, func() error { return ours(replay.Cursor{}, n) }) },
	)
	if err != nil {
		return Result{}, err
	}

	// First chunk: start in the middle of the stream, take one, stop.
	mid := first + eventlog.Seq(n/2)
	var baseFirst, subFirst series
	err = alternate(roundsOf(replayStarts, 20),
		func(int) error { return baseFirst.sequential(20, func() error { return raw(mid, 1) }) },
		func(int) error {
			return subFirst.sequential(20, func() error { return ours(replay.CursorAt(mid-1), 1) })
		},
	)
	if err != nil {
		return Result{}, err
	}
	p50, p99 := percentile(subFirst.lat, 50), percentile(subFirst.lat, 99)
	label := fmt.Sprintf("%dk chunks", n/1000)
	if n < 1000 {
		label = fmt.Sprintf("%d chunks", n)
	}
	return Result{Rows: []Row{
		{
			Figure: "chunks/s replay " + label, Value: sub.rate(),
			Baseline: "raw ordered consumer", BaselineValue: base.rate(),
			Target: 0.7, TargetNote: "at least 0.7x",
		},
		{
			Figure: "p50 us first chunk", Value: micros(p50), LowerIsBetter: true,
			Baseline: "raw ordered consumer", BaselineValue: micros(percentile(baseFirst.lat, 50)),
		},
		{
			Figure: "p99 us first chunk", Value: micros(p99), LowerIsBetter: true,
			Baseline: "raw ordered consumer", BaselineValue: micros(percentile(baseFirst.lat, 99)),
		},
		{
			Figure: "p99 us first chunk", Value: micros(p99), LowerIsBetter: true,
			Baseline: "5 ms budget", BaselineValue: micros(5 * time.Millisecond),
			Target: 1, TargetNote: "within 5 ms",
		},
	}}, nil
}

// fillStream appends a stream of n chunks (start, deltas, finish) as chunk
// events in atomic batches, as chunk.Writer stores them, and returns
// the sequence of the first.
func fillStream(ctx context.Context, lg *eventlog.Log, agent, stream string, n int) (eventlog.Seq, error) {
	delta := strings.Repeat("x", replayDeltaSize)
	var first eventlog.Seq
	for off := 0; off < n; off += fillBatch {
		evs := make([]eventlog.Event, min(fillBatch, n-off))
		for i := range evs {
			k := off + i
			c := chunk.Chunk{Type: chunk.TextDelta, ID: "t1", Delta: delta}
			switch k {
			case 0:
				c = chunk.Chunk{Type: chunk.Start, MessageID: "m1", RequestID: "r1"}
			case n - 1:
				c = chunk.Chunk{Type: chunk.Finish}
			}
			data, err := json.Marshal(c)
			if err != nil {
				return 0, err
			}
			evs[i] = eventlog.Event{Agent: agent, Stream: stream, Type: "chunk", ID: fmt.Sprintf("%s/%d", stream, k), Data: data}
		}
		last, err := lg.AppendBatch(ctx, evs)
		if err != nil {
			return 0, err
		}
		if off == 0 {
			first = last - eventlog.Seq(len(evs)-1)
		}
	}
	return first, nil
}
