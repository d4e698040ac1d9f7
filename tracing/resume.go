package tracing

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// A span cannot survive a crash: the SDK exports it when it ends, and a
// process killed under a turn never ends it. Resuming it means starting
// it again, in the process that recovers the work, with the same trace
// id, span id, parent and start time, and ending that one: the backend
// then receives the span once, whole, and the spans the dead process had
// exported under it (a model call, a tool call that ended before the
// crash) keep their parent. The span id comes from IDGenerator, which a
// TracerProvider must be built with (package otelenv does it); under
// another provider a resumed span gets a new id under the same parent.

type wantKey struct{}

// want is a span id asked for once.
type want struct {
	traceID trace.TraceID
	spanID  trace.SpanID
	used    atomic.Bool
}

// take returns the wanted ids once; every later call gets ok false.
func (w *want) take(traceID trace.TraceID) (trace.TraceID, trace.SpanID, bool) {
	if w == nil || (traceID.IsValid() && traceID != w.traceID) || !w.used.CompareAndSwap(false, true) {
		return trace.TraceID{}, trace.SpanID{}, false
	}
	return w.traceID, w.spanID, true
}

// Resume starts again a span that a crash (or a stop) left unended:
// named name, with the trace and span id of self, as the child of the
// span parentID of that trace (none: self began the trace), started at
// start. It returns ctx with the span. An invalid self starts a new span
// under ctx's, as Start does.
//
// Only the last incarnation of a span may end: a run that stops without
// finishing the span's work leaves it unended for the next one.
func (t Tracer) Resume(ctx context.Context, name string, self trace.SpanContext, parentID trace.SpanID, start time.Time, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if t.tr == nil {
		return ctx, noSpan
	}
	if !self.IsValid() {
		return t.tr.Start(ctx, name, opts...)
	}
	pctx := trace.ContextWithSpanContext(ctx, trace.SpanContext{}) // no parent: self is a root
	if parentID.IsValid() {
		pctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: self.TraceID(), SpanID: parentID, TraceFlags: self.TraceFlags(), TraceState: self.TraceState(), Remote: true,
		}))
	}
	w := &want{traceID: self.TraceID(), spanID: self.SpanID()}
	if !start.IsZero() {
		opts = append(opts, trace.WithTimestamp(start))
	}
	_, span := t.tr.Start(context.WithValue(pctx, wantKey{}, w), name, opts...)
	// The returned context holds the span but not the wish, so the span's
	// children get ids of their own.
	return trace.ContextWithSpan(ctx, span), span
}

// IDGenerator generates random trace and span ids, except for a span
// started by Tracer.Resume, which gets the ids it resumes. Give it to the
// SDK's TracerProvider (sdktrace.WithIDGenerator). It is safe for
// concurrent use.
type IDGenerator struct{}

// NewIDs returns the ids of a new root span.
func (IDGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if w, _ := ctx.Value(wantKey{}).(*want); w != nil {
		if tid, sid, ok := w.take(trace.TraceID{}); ok {
			return tid, sid
		}
	}
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.NativeEndian.PutUint64(tid[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, newSpanID()
}

// NewSpanID returns the id of a new span of trace traceID.
func (IDGenerator) NewSpanID(ctx context.Context, traceID trace.TraceID) trace.SpanID {
	if w, _ := ctx.Value(wantKey{}).(*want); w != nil {
		if _, sid, ok := w.take(traceID); ok {
			return sid
		}
	}
	return newSpanID()
}

func newSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.NativeEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}
