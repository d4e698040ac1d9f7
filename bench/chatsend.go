package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/eventlog"
)

// chatSend times chat.Agent.Send on a fenced log (as agentd appends: an
// Owner set, so batches stay atomic under either sync mode), from the call
// to its return: the user message, turn.started and the turn fiber's start
// made durable and shown by the views. Each Send's turn (the local model,
// a one-line answer) runs to its end before the next, untimed. Beside it,
// one fenced Append of an event the size of turn.started on the same log:
// a Send costs that many synced writes plus its reads and waits.
func chatSend(ctx context.Context, env *Env) (Result, error) {
	n := env.Count(300, 600)
	g, err := openToolRigWith(ctx, env, func(c *eventlog.Config) { c.Owner = fenceOwner{} })
	if err != nil {
		return Result{}, err
	}
	defer g.close()
	h, err := g.host("send", newStepTimer())
	if err != nil {
		return Result{}, err
	}
	defer h.close()
	i := 0
	send := func() error {
		i++
		_, err := h.a.Send(ctx, chat.SendRequest{Text: fmt.Sprintf("bench send %d", i)})
		return err
	}
	var sub, base series
	ours := func(k int) error {
		for range k {
			if err := sub.sequential(1, send); err != nil {
				return err
			}
			h.r.Wait() // the turn ends before the next Send, untimed
		}
		return nil
	}
	data, _ := json.Marshal(map[string]any{"requestId": strings.Repeat("r", 22), "streamId": strings.Repeat("s", 22),
		"messageId": strings.Repeat("m", 22), "assistantMessageId": strings.Repeat("a", 22)})
	ev := eventlog.Event{Agent: "send-baseline", Type: "bench.appended", Data: data}
	appendOne := func() error { _, err := g.lg.Append(ctx, ev); return err }
	var w series
	if err := errors.Join(w.sequential(warmup, appendOne), ours(10)); err != nil {
		return Result{}, fmt.Errorf("warm up: %w", err)
	}
	sub = series{}
	rounds := roundsOf(n, 50)
	err = alternate(rounds,
		func(r int) error { return base.sequential(split(n, rounds, r), appendOne) },
		func(r int) error { return ours(split(n, rounds, r)) },
	)
	if err = errors.Join(err, g.check(ctx)); err != nil {
		return Result{}, err
	}
	const bl = "one fenced Append"
	return Result{Rows: []Row{
		{Figure: "Send p50 us", Value: micros(percentile(sub.lat, 50)), Baseline: bl + ", p50 us",
			BaselineValue: micros(percentile(base.lat, 50)), LowerIsBetter: true},
		{Figure: "Send p99 us", Value: micros(percentile(sub.lat, 99)), Baseline: bl + ", p99 us",
			BaselineValue: micros(percentile(base.lat, 99)), LowerIsBetter: true},
	}}, nil
}
