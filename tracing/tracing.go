package tracing

import (
	"context"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Scope is the instrumentation scope of Forever's spans: every package
// names its tracer after itself under it ("github.com/forever-agents/forever/chat").
const Scope = "github.com/forever-agents/forever"

// Tracer is a tracer that may be off. The zero Tracer is off: Start
// returns ctx as it is and a span that records nothing, without
// allocating, so code that traces costs nothing when tracing is off.
// It is safe for concurrent use.
type Tracer struct {
	tr trace.Tracer // nil: off
}

// New returns the tracer of package pkg (a path under Scope, such as
// "chat") from tp. It is off when tp is nil or a no-op provider: a
// program without tracing passes nil down its configs.
func New(tp trace.TracerProvider, pkg string) Tracer {
	if !Enabled(tp) {
		return Tracer{}
	}
	return Tracer{tr: tp.Tracer(Scope + "/" + pkg)}
}

// Enabled reports whether tp records anything: false for nil and for
// the API's no-op providers.
func Enabled(tp trace.TracerProvider) bool {
	switch tp.(type) {
	case nil, noop.TracerProvider, *noop.TracerProvider:
		return false
	}
	return true
}

// On reports whether the tracer records spans.
func (t Tracer) On() bool { return t.tr != nil }

// noSpan is the span of an off Tracer: it records nothing.
var noSpan = trace.SpanFromContext(context.Background())

// Start starts a span named name as a child of ctx's span (or of the
// remote span context in ctx), and returns ctx with it. Off, it returns
// ctx and a span that records nothing. Guard attribute building with
// span.IsRecording(), so that it costs nothing either when off or when
// the trace is not sampled.
func (t Tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if t.tr == nil {
		return ctx, noSpan
	}
	return t.tr.Start(ctx, name, opts...)
}

// TraceID returns the hex trace id of ctx's span, or "" when ctx carries
// none (tracing off, or no span started).
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}
