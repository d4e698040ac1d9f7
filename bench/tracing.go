package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/forever-agents/forever/tracing"
)

// tracingCost measures what OpenTelemetry tracing adds to a chat turn:
// turns of toolCallSteps no-op tool calls on the local model (Rate -1),
// each on a fresh agent, timed from Send to the end of its fiber (as
// tool-call's), with tracing off (a nil TracerProvider, as agentd runs
// without OTEL_* variables), on (the SDK with its batch span processor and
// the OTLP/HTTP exporter, sending to an in-process receiver that reads and
// drops the requests, so encoding and sending are counted), and on with
// message contents recorded (--trace-content). The three alternate in
// rounds. A turn here makes 1 invoke_agent, toolCallSteps+1 chat,
// toolCallSteps execute_tool and toolCallSteps fiber.step spans.
//
// "Off" against the code before tracing is a comparison across builds:
// run tool-turn and fiber-step at both commits, alternating (see
// docs/benchmarks.md, Issue 25).
func tracingCost(ctx context.Context, env *Env) (Result, error) {
	n := max(2, env.Count(30, 150)) // turns per series
	g, err := openToolRig(ctx, env)
	if err != nil {
		return Result{}, err
	}
	defer g.close()

	var received atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		received.Add(n)
		w.WriteHeader(http.StatusOK)
	}))
	defer sink.Close()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(sink.URL+"/v1/traces"))
	if err != nil {
		return Result{}, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithIDGenerator(tracing.IDGenerator{}))
	defer tp.Shutdown(context.WithoutCancel(ctx))

	series3 := func(s *series, on, content bool, count int) error {
		g.tp, g.content = nil, false
		if on {
			g.tp, g.content = tp, content
		}
		for range count {
			if err := g.freshTurn(ctx, s, newStepTimer(), toolCallSteps); err != nil {
				return err
			}
		}
		return nil
	}
	var w series
	if err := errors.Join(series3(&w, false, false, toolWarmup), series3(&w, true, false, toolWarmup), series3(&w, true, true, toolWarmup)); err != nil {
		return Result{}, fmt.Errorf("warm up: %w", err)
	}
	var off, on, content series
	rounds := roundsOf(n, toolChunk)
	err = alternate(rounds,
		func(r int) error { return series3(&off, false, false, split(n, rounds, r)) },
		func(r int) error { return series3(&on, true, false, split(n, rounds, r)) },
		func(r int) error { return series3(&content, true, true, split(n, rounds, r)) },
	)
	if err = errors.Join(err, tp.ForceFlush(ctx), g.check(ctx)); err != nil {
		return Result{}, err
	}
	if received.Load() == 0 {
		return Result{}, errors.New("tracing on exported nothing")
	}
	turn := fmt.Sprintf("%d-tool turn", toolCallSteps)
	const bl = "tracing off"
	return Result{Rows: []Row{
		{Figure: turn + " p50 us, tracing on", Value: micros(percentile(on.lat, 50)),
			Baseline: bl + ", p50 us", BaselineValue: micros(percentile(off.lat, 50)), LowerIsBetter: true},
		{Figure: turn + " p99 us, tracing on", Value: micros(percentile(on.lat, 99)),
			Baseline: bl + ", p99 us", BaselineValue: micros(percentile(off.lat, 99)), LowerIsBetter: true},
		{Figure: turn + " p50 us, tracing on with contents", Value: micros(percentile(content.lat, 50)),
			Baseline: bl + ", p50 us", BaselineValue: micros(percentile(off.lat, 50)), LowerIsBetter: true},
	}}, nil
}
