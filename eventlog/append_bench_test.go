package eventlog_test

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// Benchmark parameters: a 64-byte event, 64 concurrent appenders, a window
// of 256 pending async publishes, atomic batches of 100.
const (
	benchPayload = 64
	benchWorkers = 64
	benchWindow  = 256
	benchBatch   = 100
)

// BenchmarkAppend measures appends against a raw JetStream baseline on a
// real embedded server, under sync always (fsync per write) and the
// server's default sync interval. Each leaf reports msgs/s. Compare leaves
// of one run only; end-to-end comparisons with baselines interleaved live in
// go run ./bench.
//
//	go test -run XXX -bench BenchmarkAppend -benchtime 2000x ./eventlog/
func BenchmarkAppend(b *testing.B) {
	data := append(append([]byte{'"'}, bytes.Repeat([]byte("x"), benchPayload-2)...), '"')
	type target struct {
		lg      *eventlog.Log
		nc      *nats.Conn
		js      jetstream.JetStream
		subject string // on a raw stream configured like the events stream
	}
	modes := []struct {
		name   string
		always bool
		t      *target
	}{{name: "always", always: true}, {name: "interval"}}
	// Each mode's server runs for the whole benchmark: the sub-benchmarks
	// share it (leaves run several times with growing b.N).
	for i := range modes {
		s := eventlogtest.RunServer(b, eventlogtest.ServerOptions{SyncAlways: modes[i].always})
		lg := eventlogtest.OpenOn(b, s, eventlog.Config{})
		nc := eventlogtest.Connect(b, s)
		js, err := jetstream.New(nc)
		if err != nil {
			b.Fatal(err)
		}
		_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{
			Name: "RAW", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage,
			Duplicates: eventlog.DefaultDuplicates, AllowAtomicPublish: true, AllowDirect: true,
		})
		if err != nil {
			b.Fatal(err)
		}
		modes[i].t = &target{lg: lg, nc: nc, js: js, subject: "raw.a1"}
	}
	// each runs f as a sub-benchmark per mode and reports msgs/s.
	each := func(b *testing.B, f func(b *testing.B, t *target)) {
		for _, m := range modes {
			b.Run(m.name, func(b *testing.B) {
				t := m.t
				b.ResetTimer()
				f(b, t)
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
	event := func(agent string) eventlog.Event {
		return eventlog.Event{Agent: agent, Type: "bench.appended", Data: data}
	}

	b.Run("sync/raw-publish", func(b *testing.B) {
		each(b, func(b *testing.B, t *target) {
			ctx := b.Context()
			for range b.N {
				if _, err := t.js.PublishMsg(ctx, &nats.Msg{Subject: t.subject, Data: data}); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("sync/append", func(b *testing.B) {
		each(b, func(b *testing.B, t *target) {
			ctx, e := b.Context(), event("a1")
			for range b.N {
				if _, err := t.lg.Append(ctx, e); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("async/raw-publish-async", func(b *testing.B) {
		each(b, func(b *testing.B, t *target) {
			var failed atomic.Int64
			js, err := jetstream.New(t.nc,
				jetstream.WithPublishAsyncMaxPending(benchWindow),
				jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { failed.Add(1) }))
			if err != nil {
				b.Fatal(err)
			}
			for range b.N {
				// A full window under sync always drains slower than the
				// default stall wait of 200ms.
				if _, err := js.PublishMsgAsync(&nats.Msg{Subject: t.subject, Data: data}, jetstream.WithStallWait(time.Minute)); err != nil {
					b.Fatal(err)
				}
			}
			select {
			case <-js.PublishAsyncComplete():
			case <-b.Context().Done():
				b.Fatal(b.Context().Err())
			}
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d async publishes failed", n)
			}
		})
	})
	b.Run("async/append-concurrent", func(b *testing.B) {
		each(b, func(b *testing.B, t *target) {
			g, ctx := errgroup.WithContext(b.Context())
			var next atomic.Int64
			for w := range benchWorkers {
				e := event(fmt.Sprintf("w%d", w))
				g.Go(func() error {
					for next.Add(1) <= int64(b.N) {
						if _, err := t.lg.Append(ctx, e); err != nil {
							return err
						}
					}
					return nil
				})
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run(fmt.Sprintf("batch%d/append-batch", benchBatch), func(b *testing.B) {
		each(b, func(b *testing.B, t *target) {
			ctx, e := b.Context(), event("a1")
			for off := 0; off < b.N; off += benchBatch {
				// AppendBatch fills in IDs in place: a fresh slice per batch.
				evs := make([]eventlog.Event, min(benchBatch, b.N-off))
				for i := range evs {
					evs[i] = e
				}
				if _, err := t.lg.AppendBatch(ctx, evs); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}
