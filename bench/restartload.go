package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/eventlog"
)

// Restart-under-load scenario parameters.
const (
	// restartLoadChats is how many agents chat at once: with the local
	// model at restartLoadRate tokens/s each, about 1,500 chunks/s.
	restartLoadChats = 30
	restartLoadRate  = "50"
	// restartLoadRounds is how many restarts of each kind are timed, at
	// -n 1 and above.
	restartLoadRounds = 10
	// restartLoadWarm is how long the load runs before the first timed
	// restart at -n 1: the duplicate window of the streams (2m) fills.
	restartLoadWarm = 2*time.Minute + 10*time.Second
	// restartLoadBetween is the load between two restarts.
	restartLoadBetween = 8 * time.Second
	// restartLoadTarget: restart to ready under load p99 within 2x of the
	// idle node's p99.
	restartLoadTarget = 1 / 2.0
)

// restartLoad measures restart-to-ready of the real agentd binary under
// sustained chat load against an idle node in the same run: two agentd on
// data dirs of their own, one with restartLoadChats agents chatting without
// pause on the local model (about 1,500 chunks/s), one idle. After the
// load warmed up (a duplicate window), rounds alternate between them: the
// node is SIGKILLed and restarted, and the time from the start until GET
// /readyz answers 200 is taken, with the load going on (its commands fail
// while the node is down, and are sent again). The figures are p50 and p99
// over the rounds, and the chunk rate the load sustained.
func restartLoad(ctx context.Context, env *Env) (Result, error) {
	bin, err := env.AgentdBinary(ctx)
	if err != nil {
		return Result{}, err
	}
	var nodes [2]*agentdProc
	for i := range nodes {
		dir, err := env.TempDir()
		if err != nil {
			return Result{}, err
		}
		if nodes[i], err = newAgentdProc(bin, dir, env.Mode, "--local-rate", restartLoadRate); err != nil {
			return Result{}, err
		}
		defer nodes[i].kill()
		if _, err := nodes[i].start(ctx); err != nil {
			return Result{}, err
		}
	}
	idle, loaded := nodes[0], nodes[1]
	lctx, stop := context.WithCancel(ctx)
	load := &chatLoad{p: loaded}
	var wg sync.WaitGroup
	for i := range restartLoadChats {
		wg.Go(func() { load.chat(lctx, fmt.Sprintf("load%d", i)) })
	}
	defer func() { stop(); wg.Wait() }()
	warm, between := restartLoadWarm, restartLoadBetween
	if env.cfg.Scale < 1 {
		warm = time.Duration(float64(warm) * env.cfg.Scale)
		between = max(time.Second, time.Duration(float64(between)*env.cfg.Scale))
	}
	env.Logger.Info("restart-load: warming the load up", "for", warm.Round(time.Second))
	rateStart, err := loaded.lastChunk(ctx)
	if err != nil {
		return Result{}, err
	}
	rateAt := time.Now()
	select {
	case <-time.After(warm):
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	var idleTimes, loadTimes []time.Duration
	restart := func(p *agentdProc, into *[]time.Duration) error {
		p.kill()
		d, err := p.start(ctx)
		if err != nil {
			return err
		}
		*into = append(*into, d)
		return nil
	}
	rounds := max(2, min(restartLoadRounds, env.Count(restartLoadRounds, restartLoadRounds)))
	err = alternate(rounds,
		func(int) error { return restart(idle, &idleTimes) },
		func(int) error {
			if err := restart(loaded, &loadTimes); err != nil {
				return err
			}
			select {
			case <-time.After(between):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	if err != nil {
		return Result{}, err
	}
	rateEnd, err := loaded.lastChunk(ctx)
	if err != nil {
		return Result{}, err
	}
	rate := float64(rateEnd-rateStart) / time.Since(rateAt).Seconds()
	env.Logger.Info("restart-load: done", "chunks/s", int(rate), "chats", load.chats.Load(), "refused", load.refused.Load())
	return Result{Rows: []Row{
		{Figure: "restart to ready p99 ms under chat load, after SIGKILL", Value: millis(percentile(loadTimes, 99)),
			Baseline: "idle node, p99 ms", BaselineValue: millis(percentile(idleTimes, 99)), LowerIsBetter: true,
			Target: restartLoadTarget, TargetNote: "within 2x of idle"},
		{Figure: "restart to ready p50 ms under chat load, after SIGKILL", Value: millis(percentile(loadTimes, 50)),
			Baseline: "idle node, p50 ms", BaselineValue: millis(percentile(idleTimes, 50)), LowerIsBetter: true},
		{Figure: "chunks/s the load sustained (restarts included)", Value: rate},
	}}, nil
}

// chatLoad keeps agents chatting with agentd p: each sends a chat, waits
// until its turn ended, and sends the next; a command that fails (the node
// restarting) is sent again a moment later.
type chatLoad struct {
	p              *agentdProc
	chats, refused atomic.Int64
}

func (l *chatLoad) chat(ctx context.Context, agent string) {
	var nc *nats.Conn
	defer func() {
		if nc != nil {
			nc.Close()
		}
	}()
	pause := func() bool {
		select {
		case <-time.After(100 * time.Millisecond):
			return true
		case <-ctx.Done():
			return false
		}
	}
	for ctx.Err() == nil {
		if nc == nil {
			var err error
			if nc, err = nats.Connect("nats://"+l.p.natsAddr, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond)); err != nil {
				nc = nil
				if !pause() {
					return
				}
				continue
			}
		}
		msg, err := nc.RequestWithContext(ctx, "forever.cmd."+agent+".chat", []byte(`{"text":"Tell me a story about a lighthouse."}`))
		if err != nil || msg.Header.Get("Nats-Service-Error-Code") != "" {
			l.refused.Add(1)
			if !pause() {
				return
			}
			continue
		}
		l.chats.Add(1)
		var r struct {
			StreamID string       `json:"streamId"`
			Cursor   eventlog.Seq `json:"cursor"`
		}
		json.Unmarshal(msg.Data, &r)
		// The turn is over once the agent's status shows no active turn.
		for ctx.Err() == nil {
			if !pause() {
				return
			}
			msg, err := nc.RequestWithContext(ctx, "forever.cmd."+agent+".status", nil)
			if err != nil {
				continue
			}
			var st struct {
				Detail struct {
					ActiveTurn *struct{} `json:"activeTurn"`
				} `json:"detail"`
			}
			if json.Unmarshal(msg.Data, &st) == nil && st.Detail.ActiveTurn == nil {
				break
			}
		}
	}
}

// lastChunk returns the last sequence of agentd p's chunks stream (the sum
// of its shards').
func (p *agentdProc) lastChunk(ctx context.Context) (uint64, error) {
	nc, err := p.connect()
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	ls, err := eventlog.ReadStreams(ctx, js)
	if err != nil {
		return 0, fmt.Errorf("bench: chunks stream: %w", err)
	}
	// Of a sharded cluster, the sum of the shards' last sequences: it
	// grows as any shard's does.
	var last uint64
	for _, name := range ls.Chunks {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return 0, fmt.Errorf("bench: chunks stream: %w", err)
		}
		last += s.CachedInfo().State.LastSeq
	}
	return last, nil
}
