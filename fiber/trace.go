package fiber

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/forever-agents/forever/tracing"
)

// Spans of the package (with Config.TracerProvider):
//
//	fiber.step     one Step: forever.fiber.step.key, forever.fiber.op.id,
//	               forever.fiber.step.outcome (run, rerun, replayed,
//	               maybe_executed); the child of the span in Step's ctx
//	fiber.recover  one recovery attempt, around the hook: forever.fiber.id,
//	               .name, .attempt and a forever.recovery event; the child
//	               of the span the fiber was started under
//	fiber.abandon  a fiber given up, with the cause as its error
const (
	spanStep    = "fiber.step"
	spanRecover = "fiber.recover"
	spanAbandon = "fiber.abandon"
)

// recoverSpanKey holds, in a recovery hook's ctx, the fiber.recover span
// the Runner started for it.
type recoverSpanKey struct{}

// traceContext returns the context a fiber's function runs under: parent,
// or, for a resumed fiber whose hook did not start a span of its own,
// parent under the span the fiber was first started under, so that the
// resumed run's spans join the trace of the run a crash cut off.
func (f *Fiber) traceContext(parent context.Context) context.Context {
	if f.traceParent == "" || !f.r.tracer.On() {
		return parent
	}
	if s, ok := parent.Value(recoverSpanKey{}).(trace.Span); ok && s != trace.SpanFromContext(parent) {
		return parent // the hook's own span
	}
	return tracing.ContextWithTraceparent(parent, f.traceParent)
}

// startRecoverSpan starts the span of one recovery attempt, the child of
// the span the fiber was started under.
func (r *Runner) startRecoverSpan(ctx context.Context, rec Recovered) (context.Context, trace.Span) {
	if !r.tracer.On() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	ctx, span := r.tracer.Start(tracing.ContextWithTraceparent(ctx, rec.TraceParent), spanRecover)
	if span.IsRecording() {
		span.SetAttributes(tracing.AgentID.String(r.cfg.Agent), tracing.FiberID.String(rec.ID),
			tracing.FiberName.String(rec.Name), tracing.FiberAttempt.Int(rec.Attempt))
		span.AddEvent(tracing.EventRecovery, trace.WithAttributes(tracing.RecoveryAttempt.Int(rec.Attempt)))
	}
	return context.WithValue(ctx, recoverSpanKey{}, span), span
}

// startAbandonSpan starts the span of a fiber given up.
func (r *Runner) startAbandonSpan(ctx context.Context, row Row, attempts int, cause error) (context.Context, trace.Span) {
	if !r.tracer.On() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	ctx, span := r.tracer.Start(tracing.ContextWithTraceparent(ctx, row.TraceParent), spanAbandon)
	if span.IsRecording() {
		span.SetAttributes(tracing.AgentID.String(r.cfg.Agent), tracing.FiberID.String(row.ID),
			tracing.FiberName.String(row.Name), tracing.FiberAttempt.Int(attempts))
	}
	return ctx, span
}

// startStepSpan starts the span of one Step.
func (f *Fiber) startStepSpan(ctx context.Context, key, opID string, outcome string) (context.Context, trace.Span) {
	if !f.r.tracer.On() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	ctx, span := f.r.tracer.Start(ctx, spanStep)
	if span.IsRecording() {
		span.SetAttributes(tracing.FiberID.String(f.id), tracing.StepKey.String(key), tracing.OpID.String(opID),
			tracing.StepOutcome.String(outcome))
	}
	return ctx, span
}

// endSpan ends span, with err as its error status.
func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
		var pe *PanicError
		if errors.As(err, &pe) {
			span.SetAttributes(attribute.String("error.type", "panic"))
		}
	}
	span.End()
}

// String is the action as a step span's outcome.
func (a stepAction) String() string {
	switch a {
	case stepRun:
		return "run"
	case stepCached:
		return "replayed"
	case stepRerun:
		return "rerun"
	case stepAmbiguous:
		return "maybe_executed"
	}
	return "unknown"
}
