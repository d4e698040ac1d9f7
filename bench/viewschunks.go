package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
)

// views-rebuild-chunks scenario parameters.
const (
	chunksPerStream  = 200  // chunks of one chat stream: start, steps, ~194 text deltas, finish
	chunkFillBatch   = 1000 // chunks per AppendBatch while filling
	chunkRebuildRuns = 2    // timed rebuilds per variant and size (alternated)
)

// viewsChunksSizes are the chunk counts rebuilt, before -n scales them.
var viewsChunksSizes = []int{100_000, 1_000_000}

// viewsRebuildChunks times a rebuild of every view agentd keeps from an
// empty Pebble, on a log whose chunks stream holds N chunks (chat streams of
// chunksPerStream chunks, each ending with finish, over viewsAgents
// agents) and whose events stream holds each stream's turn (the seven
// events views-rebuild writes), from opening the Log until every view is
// ready:
//
//   - ours: the views as agentd wires them; the streams view is
//     bootstrapped from each stream's first and last stored chunk
//     (eventlog.Log.Ends);
//   - baseline: the same, plus the streams view as it was rebuilt before,
//     replaying every stored chunk (its Bootstrap off, under another name),
//     ready once both are.
//
// Figures are the mean over chunkRebuildRuns rebuilds of each, alternated.
// Issue 21 asks for a rebuild within 2 s at 1M chunks.
func viewsRebuildChunks(ctx context.Context, env *Env) (Result, error) {
	var res Result
	for _, size := range viewsChunksSizes {
		n := max(chunksPerStream, env.Count(size, size))
		row, err := viewsRebuildChunksSize(ctx, env, n)
		if err != nil {
			return res, err
		}
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

func viewsRebuildChunksSize(ctx context.Context, env *Env, n int) (Row, error) {
	cfg, err := env.LogConfig()
	if err != nil {
		return Row{}, err
	}
	defer env.DropLog(cfg)
	streams := n / chunksPerStream
	fillStart := time.Now()
	if err := fillChunkStreams(ctx, cfg, streams); err != nil {
		return Row{}, fmt.Errorf("fill: %w", err)
	}
	env.Logger.Info("views-rebuild-chunks: filled", "chunks", streams*chunksPerStream, "streams", streams, "took", time.Since(fillStart).Round(time.Millisecond))
	var ours, base time.Duration
	round := func(replay bool, total *time.Duration) func(int) error {
		return func(int) error {
			took, err := rebuildWithChunks(ctx, env, cfg, replay)
			*total += took
			return err
		}
	}
	if err := alternate(chunkRebuildRuns, round(false, &ours), round(true, &base)); err != nil {
		return Row{}, err
	}
	return Row{
		Figure: fmt.Sprintf("ms rebuild of every view, %s chunks in %d streams", sizeLabel(streams*chunksPerStream), streams),
		Value:  millis(ours / chunkRebuildRuns), LowerIsBetter: true,
		Baseline: "streams view replaying every chunk, ms", BaselineValue: millis(base / chunkRebuildRuns),
	}, nil
}

// fillChunkStreams appends streams chat streams of chunksPerStream chunks
// to the chunks stream of cfg, and their turns to its events stream.
func fillChunkStreams(ctx context.Context, cfg eventlog.Config, streams int) error {
	lg, err := eventlog.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer lg.Close()
	evs := make([]eventlog.Event, 0, 7*viewsTurnsPB)
	cs := make([]eventlog.Event, 0, chunkFillBatch)
	flush := func() error {
		if len(cs) == 0 {
			return nil
		}
		_, err := lg.AppendBatch(ctx, cs)
		cs = cs[:0]
		return err
	}
	for t := range streams {
		agent, stream := fmt.Sprintf("v%d", t%viewsAgents), fmt.Sprintf("s%d", t)
		evs = append(evs, turnEvents(agent, t)...)
		if len(evs) == cap(evs) || t == streams-1 {
			if _, err := lg.AppendBatch(ctx, evs); err != nil {
				return err
			}
			evs = evs[:0]
		}
		for i := range chunksPerStream {
			c := chunk.Chunk{Type: chunk.TextDelta, ID: "t0", Delta: "word "}
			switch i {
			case 0:
				c = chunk.Chunk{Type: chunk.Start, MessageID: fmt.Sprintf("ma%d", t), RequestID: fmt.Sprintf("req%d", t)}
			case 1:
				c = chunk.Chunk{Type: chunk.StartStep}
			case 2:
				c = chunk.Chunk{Type: chunk.TextStart, ID: "t0"}
			case chunksPerStream - 3:
				c = chunk.Chunk{Type: chunk.TextEnd, ID: "t0"}
			case chunksPerStream - 2:
				c = chunk.Chunk{Type: chunk.FinishStep}
			case chunksPerStream - 1:
				c = chunk.Chunk{Type: chunk.Finish}
			}
			data, err := json.Marshal(c)
			if err != nil {
				return err
			}
			cs = append(cs, eventlog.Event{Agent: agent, Stream: stream, Type: chunk.EventChunk,
				ID: fmt.Sprintf("%s/%d", stream, i), Data: data})
			if len(cs) == cap(cs) {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}

// rebuildWithChunks opens a Log on cfg's streams with an empty Pebble,
// builds agentd's views (with replay, also a streams view that replays
// every chunk) and returns the time from open until all are ready and
// have applied the last stored event of each stream.
func rebuildWithChunks(ctx context.Context, env *Env, cfg eventlog.Config, replay bool) (time.Duration, error) {
	var err error
	if cfg.Dir, err = env.TempDir(); err != nil {
		return 0, err
	}
	defer os.RemoveAll(cfg.Dir)
	start := time.Now()
	lg, err := eventlog.Open(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer lg.Close()
	vs, err := openViews(lg, true)
	if err != nil {
		return 0, err
	}
	var old *eventlog.Projector
	if replay {
		p := chunk.StreamsProjection()
		p.Name, p.Bootstrap = "streamsreplay", nil
		if old, err = lg.NewProjector(p); err != nil {
			return 0, err
		}
		vs.run = append(vs.run, old)
		vs.ready = append(vs.ready, old.Ready())
	}
	stop, err := vs.start(ctx)
	if err != nil {
		return 0, err
	}
	lastEvent, err := lg.LastSeq(ctx, eventlog.Filter{})
	if err == nil {
		err = vs.waitFor(ctx, lastEvent)
	}
	var lastChunk eventlog.Seq
	if err == nil {
		lastChunk, err = lg.LastSeq(ctx, eventlog.Filter{Chunks: true})
	}
	if err == nil {
		err = vs.store.WaitForChunks(ctx, lastChunk)
	}
	if err == nil && old != nil {
		err = old.WaitFor(ctx, lastChunk)
	}
	took := time.Since(start)
	if err == nil {
		// The rebuilt view holds every stream, ended.
		var info chunk.StreamInfo
		info, err = vs.store.Streams().Latest("v0")
		if err == nil && info.Status != chunk.StatusCompleted {
			err = fmt.Errorf("latest stream of v0 after the rebuild: %+v", info)
		}
	}
	return took, errors.Join(err, stop())
}
