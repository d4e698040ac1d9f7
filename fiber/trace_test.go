package fiber_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/tracing"
)

func newTracerProvider(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(tracing.IDGenerator{}))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp, exp
}

func spanAttr(s tracetest.SpanStub, key string) (string, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit(), true
		}
	}
	return "", false
}

// TestTraceSurvivesRecovery: a fiber started under a span records it in
// fiber.started; after a crash its recovery (fiber.recover, with a
// forever.recovery event) and the steps of its resumed run are children of
// that span, in the same trace, and a step answered from its record says
// so.
func TestTraceSurvivesRecovery(t *testing.T) {
	tp, exp := newTracerProvider(t)
	e := newEnv(t)
	r1 := e.runner(t, fiber.Config{TracerProvider: tp})
	ctx, parent := tp.Tracer("test").Start(t.Context(), "caller")
	stepped := make(chan struct{})
	_, err := r1.Go(ctx, "job", func(ctx context.Context, f *fiber.Fiber) error {
		if _, err := fiber.Step(ctx, "a", func(context.Context, string) (json.RawMessage, error) { return json.RawMessage(`1`), nil }); err != nil {
			return err
		}
		close(stepped)
		<-ctx.Done()
		return ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	parent.End()
	<-stepped
	r1.Close() // the process dies: the row stays

	started := e.events(t, fiber.EventStarted)
	if got, want := decodeData(t, started[0])["traceparent"], tracing.Format(parent.SpanContext()); got != want {
		t.Fatalf("fiber.started traceparent = %v, want %v", got, want)
	}

	e2 := e.restart(t)
	done := make(chan struct{})
	var r2 *fiber.Runner
	r2 = e2.runner(t, fiber.Config{TracerProvider: tp, Hooks: fiber.Hooks{OnFiberRecovered: func(ctx context.Context, rec fiber.Recovered) error {
		if rec.TraceParent != tracing.Format(parent.SpanContext()) {
			t.Errorf("Recovered.TraceParent = %q", rec.TraceParent)
		}
		return r2.GoResume(ctx, rec, func(ctx context.Context, f *fiber.Fiber) error {
			defer close(done)
			for _, k := range []string{"a", "b"} {
				if _, err := fiber.Step(ctx, k, func(context.Context, string) (json.RawMessage, error) { return json.RawMessage(`2`), nil }); err != nil {
					return err
				}
			}
			return nil
		})
	}}})
	if err := r2.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("resumed fiber did not finish")
	}
	r2.Wait()

	var recovers, steps []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("span %s in trace %s, want %s", s.Name, s.SpanContext.TraceID(), parent.SpanContext().TraceID())
		}
		switch s.Name {
		case "fiber.recover":
			recovers = append(recovers, s)
		case "fiber.step":
			steps = append(steps, s)
		}
	}
	if len(recovers) != 1 {
		t.Fatalf("%d fiber.recover spans, want 1", len(recovers))
	}
	rs := recovers[0]
	if rs.Parent.SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("fiber.recover's parent = %s, want the span the fiber was started under", rs.Parent.SpanID())
	}
	if len(rs.Events) != 1 || rs.Events[0].Name != tracing.EventRecovery {
		t.Errorf("fiber.recover events = %+v, want one %s", rs.Events, tracing.EventRecovery)
	}
	if a, _ := spanAttr(rs, "forever.fiber.attempt"); a != "1" {
		t.Errorf("attempt = %q, want 1", a)
	}
	var got []string
	for _, s := range steps {
		key, _ := spanAttr(s, "forever.fiber.step.key")
		outcome, _ := spanAttr(s, "forever.fiber.step.outcome")
		got = append(got, key+" "+outcome)
		if s.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("step %s (%s): parent %s, want the fiber's span %s", key, outcome, s.Parent.SpanID(), parent.SpanContext().SpanID())
		}
	}
	if want := []string{"a run", "a replayed", "b run"}; !slices.Equal(got, want) {
		t.Errorf("steps = %q, want %q", got, want)
	}
}
