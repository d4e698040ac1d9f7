package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"golang.org/x/sync/errgroup"
)

// Append scenario parameters.
const (
	warmup         = 50  // untimed operations before each series
	asyncWorkers   = 64  // goroutines calling Append in append-async
	asyncWindow    = 256 // PublishMsgAsync's max pending acks
	singleChunk    = 100 // operations per series per round in append-single
	asyncChunk     = 500 // messages per series per round in append-async
	batchSize      = 100 // events per AppendBatch in append-batch
	singleTarget   = 1 / 1.3
	singleTargetOK = "within 1.3x"
	batchTarget    = 3
)

// appendSingle compares eventlog.Log.Append, one call in flight, with a raw
// JetStream PublishMsg of the same data to a stream configured alike. The raw
// message has no headers: the gap is everything the log adds (envelope,
// type/agent/msg-id headers, deduplication, expected stream). A third series
// publishes Append's own message, pre-encoded, to split that gap into the
// server's share and the client's.
func appendSingle(ctx context.Context, env *Env) (Result, error) {
	n := env.Count(2000, 20000)
	return perSize(ctx, env, n, appendSingleSize)
}

func appendSingleSize(ctx context.Context, env *Env, n, size int) ([]Row, error) {
	lg, prefix, release, err := env.OpenLogAndRaw(ctx)
	if err != nil {
		return nil, err
	}
	defer release()

	data, subject, ev := payload(size), prefix+".a1", benchEvent("a1", size)
	raw := func() error {
		_, err := env.JS.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: data})
		return err
	}
	ours := func() error {
		_, err := lg.Append(ctx, ev)
		return err
	}
	// The same message Append sends (envelope body, headers, a fresh msg id,
	// expected stream), built once: what the server costs without the
	// client-side encoding.
	body, err := json.Marshal(eventlog.Event{Agent: "a1", Type: ev.Type, ID: nuid.Next(), Time: time.Now().UTC(), Data: ev.Data})
	if err != nil {
		return nil, err
	}
	same := func() error {
		m := nats.NewMsg(subject)
		m.Data = body
		m.Header.Set(eventlog.HeaderType, ev.Type)
		m.Header.Set(jetstream.MsgIDHeader, nuid.Next())
		_, err := env.JS.PublishMsg(ctx, m)
		return err
	}
	var base, sameS, sub series
	if err := errors.Join((&series{}).sequential(warmup, raw), (&series{}).sequential(warmup, ours), (&series{}).sequential(warmup, same)); err != nil {
		return nil, fmt.Errorf("warm up: %w", err)
	}
	rounds := roundsOf(n, singleChunk)
	err = alternate(rounds,
		func(r int) error { return base.sequential(split(n, rounds, r), raw) },
		func(r int) error { return sub.sequential(split(n, rounds, r), ours) },
		func(r int) error { return sameS.sequential(split(n, rounds, r), same) },
	)
	if err != nil {
		return nil, err
	}
	sz := sizeName(size)
	const bl = "raw PublishMsg"
	return []Row{
		{Figure: "msgs/s " + sz, Value: sub.rate(), Baseline: bl, BaselineValue: base.rate(),
			Target: singleTarget, TargetNote: singleTargetOK},
		{Figure: "p50 us " + sz, Value: micros(percentile(sub.lat, 50)), Baseline: bl,
			BaselineValue: micros(percentile(base.lat, 50)), LowerIsBetter: true,
			Target: singleTarget, TargetNote: singleTargetOK},
		{Figure: "p99 us " + sz, Value: micros(percentile(sub.lat, 99)), Baseline: bl,
			BaselineValue: micros(percentile(base.lat, 99)), LowerIsBetter: true},
		{Figure: "msgs/s " + sz, Value: sub.rate(), Baseline: "raw PublishMsg, Append's msg", BaselineValue: sameS.rate()},
	}, nil
}

// appendAsync compares asyncWorkers goroutines calling Append (each waiting
// for its acknowledgement) with one raw PublishMsgAsync loop keeping up to
// asyncWindow acknowledgements pending, ended by PublishAsyncComplete.
func appendAsync(ctx context.Context, env *Env) (Result, error) {
	n := env.Count(2000, 40000)
	return perSize(ctx, env, n, appendAsyncSize)
}

func appendAsyncSize(ctx context.Context, env *Env, n, size int) ([]Row, error) {
	lg, prefix, release, err := env.OpenLogAndRaw(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	ra, err := newRawAsync(env)
	if err != nil {
		return nil, err
	}

	data, subject := payload(size), prefix+".a1"
	raw := func(k int) error {
		return ra.publish(ctx, k, func() *nats.Msg { return &nats.Msg{Subject: subject, Data: data} })
	}
	ours := func(k int) error {
		g, gctx := errgroup.WithContext(ctx)
		for w := range asyncWorkers {
			// One agent per worker: how concurrent fibers append.
			ev := benchEvent(fmt.Sprintf("a%d", w), size)
			g.Go(func() error {
				for range split(k, asyncWorkers, w) {
					if _, err := lg.Append(gctx, ev); err != nil {
						return err
					}
				}
				return nil
			})
		}
		return g.Wait()
	}
	if err := errors.Join(raw(warmup), ours(warmup)); err != nil {
		return nil, fmt.Errorf("warm up: %w", err)
	}
	var base, sub series
	rounds := roundsOf(n, asyncChunk)
	err = alternate(rounds,
		func(r int) error { k := split(n, rounds, r); return base.timed(k, func() error { return raw(k) }) },
		func(r int) error { k := split(n, rounds, r); return sub.timed(k, func() error { return ours(k) }) },
	)
	if err != nil {
		return nil, err
	}
	return []Row{{
		Figure: "msgs/s " + sizeName(size), Value: sub.rate(),
		Baseline:      fmt.Sprintf("raw PublishMsgAsync w%d", asyncWindow),
		BaselineValue: base.rate(),
	}}, nil
}

// appendBatch compares AppendBatch with batches of batchSize, one in flight,
// with one-by-one Append (the target under sync always: at least 3x), with
// raw sequential PublishMsg, and with a raw atomic batch of the same size
// (the server's own cost of the protocol: for R1 file streams it stages each
// batch in a temporary file store).
func appendBatch(ctx context.Context, env *Env) (Result, error) {
	n := env.Count(3000, 10000)
	return perSize(ctx, env, n, appendBatchSize)
}

func appendBatchSize(ctx context.Context, env *Env, n, size int) ([]Row, error) {
	lg, prefix, release, err := env.OpenLogAndRaw(ctx)
	if err != nil {
		return nil, err
	}
	defer release()

	data, subject, ev := payload(size), prefix+".a1", benchEvent("a1", size)
	raw := func(k int) error {
		for range k {
			if _, err := env.JS.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: data}); err != nil {
				return err
			}
		}
		return nil
	}
	single := func(k int) error {
		for range k {
			if _, err := lg.Append(ctx, ev); err != nil {
				return err
			}
		}
		return nil
	}
	batch := func(k int) error {
		for off := 0; off < k; off += batchSize {
			// AppendBatch fills in IDs in place: a fresh slice per batch.
			evs := make([]eventlog.Event, min(batchSize, k-off))
			for i := range evs {
				evs[i] = ev
			}
			if _, err := lg.AppendBatch(ctx, evs); err != nil {
				return err
			}
		}
		return nil
	}
	rawBatch := func(k int) error {
		for off := 0; off < k; off += batchSize {
			if err := rawAtomicBatch(ctx, env.Conn, subject, data, min(batchSize, k-off)); err != nil {
				return err
			}
		}
		return nil
	}
	// Batches of one message: what a batch costs whatever it holds. An R1
	// stream stages each atomic batch in a file store of its own (4 fsyncs,
	// 3 directories made and renamed, about 12 files removed a batch with
	// nats-server 2.15.2 and 2.15.3, counted with strace -c): under sync
	// always it costs 9-14 synced publishes (docs/benchmarks.md).
	rawOnes := func(k int) error {
		for range k {
			if err := rawAtomicBatch(ctx, env.Conn, subject, data, 1); err != nil {
				return err
			}
		}
		return nil
	}
	if err := errors.Join(raw(warmup), single(warmup), batch(warmup), rawBatch(warmup), rawOnes(warmup)); err != nil {
		return nil, fmt.Errorf("warm up: %w", err)
	}
	// One batch's worth of each series per round.
	rounds := max(2, n/batchSize)
	var rawS, singleS, batchS, rawBatchS, rawOnesS series
	timed := func(s *series, f func(int) error) func(int) error {
		return func(int) error { return s.timed(batchSize, func() error { return f(batchSize) }) }
	}
	// A tenth as many batches of one as messages of the others: each costs
	// about as much as 9-14 synced publishes.
	ones := func(int) error { return rawOnesS.timed(batchSize/10, func() error { return rawOnes(batchSize / 10) }) }
	err = alternate(rounds, timed(&singleS, single), timed(&batchS, batch), timed(&rawS, raw), timed(&rawBatchS, rawBatch), ones)
	if err != nil {
		return nil, err
	}
	fig := fmt.Sprintf("msgs/s %s x%d", sizeName(size), batchSize)
	one := Row{Figure: fig, Value: batchS.rate(), Baseline: "Append one-by-one", BaselineValue: singleS.rate()}
	if env.Mode == SyncAlways {
		one.Target, one.TargetNote = batchTarget, "3x one-by-one"
	}
	return []Row{
		one,
		{Figure: fig, Value: batchS.rate(), Baseline: "raw PublishMsg", BaselineValue: rawS.rate()},
		{Figure: fig, Value: batchS.rate(), Baseline: fmt.Sprintf("raw atomic batch x%d", batchSize), BaselineValue: rawBatchS.rate()},
		{Figure: fmt.Sprintf("raw atomic batches of 1 msg/s %s", sizeName(size)), Value: rawOnesS.rate(), Baseline: "raw PublishMsg", BaselineValue: rawS.rate()},
	}, nil
}

// rawAtomicBatch publishes n messages as one JetStream atomic batch, the
// protocol AppendBatch uses without the event log around it: every message
// but the last without a reply, the last with Nats-Batch-Commit as a request.
func rawAtomicBatch(ctx context.Context, nc *nats.Conn, subject string, data []byte, n int) error {
	id := nuid.Next()
	for i := range n {
		m := nats.NewMsg(subject)
		m.Data = data
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		if i < n-1 {
			if err := nc.PublishMsg(m); err != nil {
				return err
			}
			continue
		}
		m.Header.Set("Nats-Batch-Commit", "1")
		resp, err := nc.RequestMsgWithContext(ctx, m)
		if err != nil {
			return fmt.Errorf("batch commit: %w", err)
		}
		var ack struct {
			Error *jetstream.APIError `json:"error"`
		}
		if err := json.Unmarshal(resp.Data, &ack); err != nil {
			return fmt.Errorf("batch commit: bad response %q: %w", resp.Data, err)
		}
		if ack.Error != nil {
			return fmt.Errorf("batch commit: %w", ack.Error)
		}
	}
	return nil
}
