package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/nats-io/nats.go/jetstream"
)

// The follow-stepdown scenario: how long a follow made while its stream
// changes leader waits for its first event. Every stop of a node moves
// its stream leaders away first (eventlog.Log.LeadAway), and every views
// catch-up and client follow made then meets such an election. 2-9% of
// the consumers made within 10 ms of a stepdown have their first pull
// answered "no responders": nats.go's ordered consumer makes itself again
// at once under Consume, but a Messages iterator waits for two missed
// heartbeats. Each round steps the log's events stream down and, a few
// milliseconds later, starts two follows of its stored events at once:
// the log's Follow and, the baseline, a bare ordered consumer iterated
// with Messages at nats.go's default heartbeat (5 s). It needs a
// cluster: -nodes 3.
const (
	followStepdownRounds  = 300 // at -n 1
	followStepdownPause   = 250 * time.Millisecond
	followStepdownTimeout = 15 * time.Second // a round's wait, past the default's 10 s
	followStepdownWriteMS = 5                // between two events of the writer
)

// followStepdown runs the scenario.
func followStepdown(ctx context.Context, env *Env) (Result, error) {
	if env.cfg.Nodes < 3 {
		env.Logger.Warn("bench: follow-stepdown skipped: it steps a replicated stream's leader down; give -nodes 3")
		return Result{}, nil
	}
	lg, release, err := env.OpenLog(ctx)
	if err != nil {
		return Result{}, err
	}
	defer release()
	stream := lg.EventsStream()
	wctx, stopWriter := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for wctx.Err() == nil {
			_, _ = lg.Append(wctx, benchEvent("w", 64)) // an append in an election fails; the next goes on
			select {
			case <-wctx.Done():
			case <-time.After(followStepdownWriteMS * time.Millisecond):
			}
		}
	})
	defer wg.Wait()
	defer stopWriter()
	if err := sleepCtx(ctx, time.Second); err != nil {
		return Result{}, err
	}
	n := env.Count(followStepdownRounds, followStepdownRounds)
	var ours, bare []time.Duration
	for round := range n {
		go func() { // the stepdown's answer comes after the election
			_, _ = env.Conn.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, 5*time.Second)
		}()
		if err := sleepCtx(ctx, time.Duration(round%6)*2*time.Millisecond); err != nil {
			return Result{}, err
		}
		var o, b time.Duration
		var oerr, berr error
		var rw sync.WaitGroup
		rw.Go(func() { o, oerr = firstOfFollow(ctx, lg) })
		rw.Go(func() { b, berr = firstOfBare(ctx, env.JS, stream) })
		rw.Wait()
		if err := errors.Join(oerr, berr); err != nil {
			return Result{}, fmt.Errorf("follow-stepdown round %d: %w", round+1, err)
		}
		ours, bare = append(ours, o), append(bare, b)
		if o > time.Second || b > time.Second {
			env.Logger.Info("follow-stepdown: a slow first event", "round", round+1, "follow", o, "bare", b)
		}
		if err := sleepCtx(ctx, followStepdownPause); err != nil {
			return Result{}, err
		}
	}
	row := func(what string, p float64) Row {
		return Row{
			Figure: fmt.Sprintf("%s ms to a follow's first event, made in a stepdown (over 1 s: %d of %d; bare: %d)",
				what, countOver(ours, time.Second), n, countOver(bare, time.Second)),
			Value:    millis(percentile(ours, p)),
			Baseline: "bare ordered consumer, default heartbeat", BaselineValue: millis(percentile(bare, p)),
			LowerIsBetter: true,
		}
	}
	return Result{Rows: []Row{row("p50", 50), row("p99", 99), row("longest", 100)}}, nil
}

// firstOfFollow times lg's Follow of the writer's events to its first.
func firstOfFollow(ctx context.Context, lg *eventlog.Log) (time.Duration, error) {
	fctx, cancel := context.WithTimeout(ctx, followStepdownTimeout)
	defer cancel()
	start := time.Now()
	for _, err := range lg.Follow(fctx, eventlog.Filter{Agent: "w"}, 0) {
		if err != nil {
			return 0, fmt.Errorf("the log's follow: %w", err)
		}
		return time.Since(start), nil
	}
	return 0, errors.New("the log's follow ended with no event")
}

// firstOfBare times a bare ordered consumer of stream to its first event.
func firstOfBare(ctx context.Context, js jetstream.JetStream, stream string) (time.Duration, error) {
	fctx, cancel := context.WithTimeout(ctx, followStepdownTimeout)
	defer cancel()
	start := time.Now()
	cons, err := js.OrderedConsumer(fctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return 0, fmt.Errorf("a bare consumer: %w", err)
	}
	msgs, err := cons.Messages()
	if err != nil {
		return 0, fmt.Errorf("a bare consumer: %w", err)
	}
	defer msgs.Stop()
	got := make(chan error, 1)
	go func() { _, err := msgs.Next(); got <- err }()
	select {
	case err := <-got:
		if err != nil {
			return 0, fmt.Errorf("a bare consumer: %w", err)
		}
		return time.Since(start), nil
	case <-fctx.Done():
		return 0, fmt.Errorf("a bare consumer: no event in %v", followStepdownTimeout)
	}
}
