package tracing

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TraceIDHeader is the header of a reply (a NATS command reply, an HTTP
// response) that names the trace the request ran in, as 32 hex digits,
// when tracing is on: look the trace up in the backend with it.
const TraceIDHeader = "Forever-Trace-Id"

// Traceparent is the W3C Trace Context header that carries a span
// context across the wire (HTTP and NATS headers).
const Traceparent = "traceparent"

// propagator is W3C Trace Context: traceparent and tracestate. It is used
// as a value, never installed as otel's global propagator.
var propagator = propagation.TraceContext{}

// Headers adapts NATS headers (nats.Header, micro.Headers: both are
// map[string][]string) to otel's TextMapCarrier. Get matches the key in
// any case, as HTTP does, since NATS headers are case-sensitive and
// clients write traceparent, Traceparent or TRACEPARENT; Set writes the
// lower-case key the W3C specification uses.
type Headers map[string][]string

// Get returns the first value of key, in any case.
func (h Headers) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

// Set replaces key's values with value.
func (h Headers) Set(key, value string) { h[strings.ToLower(key)] = []string{value} }

// Keys lists the keys.
func (h Headers) Keys() []string {
	out := make([]string, 0, len(h))
	for k := range h {
		out = append(out, k)
	}
	return out
}

// Extract returns ctx with the remote span context of the W3C
// traceparent (and tracestate) in headers, or ctx as it is when there is
// none or it does not parse.
func Extract(ctx context.Context, headers map[string][]string) context.Context {
	if len(headers) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, Headers(headers))
}

// ExtractHTTP is Extract for an HTTP request's headers.
func ExtractHTTP(ctx context.Context, h http.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// FromClient returns what a server span for a client's request starts
// from, given the W3C traceparent (and tracestate) in its headers. With
// trust the client's span context is the parent, as Extract makes it.
// Without, ctx is returned as it is and the options start a new root with
// a link to the client's span: the client cannot choose the trace agentd
// records its work in (nor join another's), nor force sampling through a
// sampled parent, yet the backend still leads from its span to agentd's.
// Headers without a valid traceparent give ctx and no options.
func FromClient(ctx context.Context, headers map[string][]string, trust bool) (context.Context, []trace.SpanStartOption) {
	if len(headers) == 0 {
		return ctx, nil
	}
	return fromClient(ctx, Headers(headers), trust)
}

// FromClientHTTP is FromClient for an HTTP request's headers.
func FromClientHTTP(ctx context.Context, h http.Header, trust bool) (context.Context, []trace.SpanStartOption) {
	if len(h) == 0 {
		return ctx, nil
	}
	return fromClient(ctx, propagation.HeaderCarrier(h), trust)
}

func fromClient(ctx context.Context, c propagation.TextMapCarrier, trust bool) (context.Context, []trace.SpanStartOption) {
	remote := propagator.Extract(ctx, c)
	if trust {
		return remote, nil
	}
	sc := trace.SpanContextFromContext(remote)
	if !sc.IsValid() || sc.Equal(trace.SpanContextFromContext(ctx)) {
		return ctx, nil
	}
	return ctx, []trace.SpanStartOption{trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: sc})}
}

// Inject writes ctx's span context into headers as traceparent (and
// tracestate); nothing when ctx carries no valid span context.
func Inject(ctx context.Context, headers map[string][]string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	propagator.Inject(ctx, Headers(headers))
}

// Format returns sc as a W3C traceparent ("00-<trace id>-<span id>-<flags>"),
// or "" when sc is not valid. It is how spans are stored in events.
func Format(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	h := Headers{}
	propagator.Inject(trace.ContextWithSpanContext(context.Background(), sc), h)
	return h.Get(Traceparent)
}

// Parse reads a W3C traceparent into a remote span context; ok is false
// when s is empty or does not parse.
func Parse(s string) (sc trace.SpanContext, ok bool) {
	if s == "" {
		return trace.SpanContext{}, false
	}
	sc = trace.SpanContextFromContext(propagator.Extract(context.Background(), Headers{Traceparent: {s}}))
	return sc, sc.IsValid()
}

// ContextWithTraceparent returns ctx with the remote span context s (a
// W3C traceparent, as Format writes it) as the parent of the spans started
// from it; ctx as it is when s does not parse. A program that stores a
// span to continue it later (a sub-agent started durably, say) stores
// Format(trace.SpanContextFromContext(ctx)) and calls this with it.
func ContextWithTraceparent(ctx context.Context, s string) context.Context {
	sc, ok := Parse(s)
	if !ok {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}
