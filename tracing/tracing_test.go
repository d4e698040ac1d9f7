package tracing_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/forever-agents/forever/tracing"
)

func newProvider(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(tracing.IDGenerator{}))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp, exp
}

// TestOffCostsNothing: a tracer from a nil or no-op provider is off, and
// its Start allocates nothing and returns ctx as it is.
func TestOffCostsNothing(t *testing.T) {
	for _, tp := range []trace.TracerProvider{nil, noop.NewTracerProvider()} {
		tr := tracing.New(tp, "test")
		if tr.On() {
			t.Fatalf("tracer of %T is on", tp)
		}
		ctx := context.Background()
		allocs := testing.AllocsPerRun(100, func() {
			c, span := tr.Start(ctx, "x")
			if span.IsRecording() || c != ctx {
				t.Fatal("an off tracer recorded or changed ctx")
			}
			span.End()
		})
		if allocs != 0 {
			t.Errorf("Start off allocates %v times", allocs)
		}
	}
}

func TestFormatParse(t *testing.T) {
	tp, _ := newProvider(t)
	_, span := tracing.New(tp, "test").Start(context.Background(), "x")
	s := tracing.Format(span.SpanContext())
	sc, ok := tracing.Parse(s)
	if !ok || sc.TraceID() != span.SpanContext().TraceID() || sc.SpanID() != span.SpanContext().SpanID() || !sc.IsRemote() {
		t.Fatalf("Parse(Format) = %v, %v", sc, ok)
	}
	for _, bad := range []string{"", "00-xyz", "00-00000000000000000000000000000000-0000000000000000-01"} {
		if _, ok := tracing.Parse(bad); ok {
			t.Errorf("Parse(%q) ok", bad)
		}
	}
	if tracing.Format(trace.SpanContext{}) != "" {
		t.Error("Format of an invalid span context is not empty")
	}
}

// TestHeadersAnyCase: a traceparent header is read whatever its case, as
// NATS clients write it.
func TestHeadersAnyCase(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, key := range []string{"traceparent", "Traceparent", "TRACEPARENT"} {
		ctx := tracing.Extract(context.Background(), map[string][]string{key: {tp}})
		if got := trace.SpanContextFromContext(ctx).TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("%s: trace id %q", key, got)
		}
	}
	h := map[string][]string{}
	tracing.Inject(tracing.ContextWithTraceparent(context.Background(), tp), h)
	if got := h["traceparent"]; len(got) != 1 || got[0] != tp {
		t.Errorf("Inject wrote %v", h)
	}
}

// TestResume: a resumed span has the ids, parent and start it resumes;
// its children get ids of their own; a root span resumes as a root.
func TestResume(t *testing.T) {
	tp, exp := newProvider(t)
	tr := tracing.New(tp, "test")
	ctx, parent := tr.Start(context.Background(), "parent")
	_, lost := tr.Start(ctx, "work") // never ended: the process dies
	self := lost.SpanContext()
	start := time.Now().Add(-time.Minute)

	rctx, span := tr.Resume(context.Background(), "work", self, parent.SpanContext().SpanID(), start)
	_, child := tr.Start(rctx, "child")
	child.End()
	span.End()
	_, root := tr.Start(context.Background(), "root")
	rootSC := root.SpanContext()
	_, again := tr.Resume(context.Background(), "root", rootSC, trace.SpanID{}, time.Time{})
	again.End()

	byName := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		byName[s.Name] = s
	}
	w := byName["work"]
	if w.SpanContext.SpanID() != self.SpanID() || w.SpanContext.TraceID() != self.TraceID() || w.Parent.SpanID() != parent.SpanContext().SpanID() || !w.StartTime.Equal(start) {
		t.Errorf("resumed span %s/%s under %s at %v; want %s/%s under %s at %v", w.SpanContext.TraceID(), w.SpanContext.SpanID(), w.Parent.SpanID(), w.StartTime,
			self.TraceID(), self.SpanID(), parent.SpanContext().SpanID(), start)
	}
	c := byName["child"]
	if c.Parent.SpanID() != self.SpanID() || c.SpanContext.SpanID() == self.SpanID() {
		t.Errorf("child %s under %s; want a new id under %s", c.SpanContext.SpanID(), c.Parent.SpanID(), self.SpanID())
	}
	r := byName["root"]
	if r.SpanContext.SpanID() != rootSC.SpanID() || r.SpanContext.TraceID() != rootSC.TraceID() || r.Parent.IsValid() {
		t.Errorf("resumed root %v under %v; want %v, no parent", r.SpanContext, r.Parent, rootSC)
	}
}

// TestHandler: an API request is a server span, the child of its
// traceparent when the handler trusts it and otherwise the root of a trace
// of its own linked to it, and the response names the trace; probes are
// not traced.
func TestHandler(t *testing.T) {
	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, trust := range []bool{true, false} {
		t.Run(fmt.Sprintf("trust=%v", trust), func(t *testing.T) {
			tp, exp := newProvider(t)
			inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
			h := tracing.Handler(tracing.New(tp, "test"), trust, inner)
			req := httptest.NewRequest(http.MethodPost, "/v1/chat/a1/stop", nil)
			req.Header.Set("traceparent", "00-"+clientTrace+"-"+clientSpan+"-01")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			spans := exp.GetSpans()
			if len(spans) != 1 || spans[0].Name != "POST /v1/chat/{id}/stop" || spans[0].SpanKind != trace.SpanKindServer {
				t.Fatalf("spans = %+v", spans)
			}
			s := spans[0]
			if got, want := rec.Header().Get(tracing.TraceIDHeader), s.SpanContext.TraceID().String(); got != want {
				t.Errorf("%s = %q, want the span's trace %s", tracing.TraceIDHeader, got, want)
			}
			if trust {
				if s.SpanContext.TraceID().String() != clientTrace || s.Parent.SpanID().String() != clientSpan || len(s.Links) != 0 {
					t.Errorf("trusted: span in %s under %s with links %v, want the child of %s/%s", s.SpanContext.TraceID(), s.Parent.SpanID(), s.Links, clientTrace, clientSpan)
				}
			} else if s.SpanContext.TraceID().String() == clientTrace || s.Parent.IsValid() || len(s.Links) != 1 ||
				s.Links[0].SpanContext.TraceID().String() != clientTrace || s.Links[0].SpanContext.SpanID().String() != clientSpan {
				t.Errorf("untrusted: span in %s under %v with links %v, want a root of its own linked to %s/%s", s.SpanContext.TraceID(), s.Parent, s.Links, clientTrace, clientSpan)
			}
			rec = httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
			if len(exp.GetSpans()) != 1 || rec.Header().Get(tracing.TraceIDHeader) != "" {
				t.Error("a probe was traced")
			}
			rec = httptest.NewRecorder()
			tracing.Handler(tracing.Tracer{}, trust, inner).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat", nil))
			if len(exp.GetSpans()) != 1 || rec.Header().Get(tracing.TraceIDHeader) != "" {
				t.Error("an off Handler traced")
			}
		})
	}
}

// TestFromClient: without a valid traceparent nothing changes; with one,
// trust makes it the parent, and distrust a link from a new root.
func TestFromClient(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct {
		name      string
		headers   map[string][]string
		trust     bool
		wantCtx   bool // ctx carries the client's span context
		wantLinks bool
	}{
		{"none", nil, false, false, false},
		{"garbled", map[string][]string{"traceparent": {"00-zz-01"}}, false, false, false},
		{"trusted", map[string][]string{"Traceparent": {tp}}, true, true, false},
		{"untrusted", map[string][]string{"traceparent": {tp}}, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, opts := tracing.FromClient(context.Background(), tc.headers, tc.trust)
			if got := trace.SpanContextFromContext(ctx).IsValid(); got != tc.wantCtx {
				t.Errorf("ctx has a span context: %v, want %v", got, tc.wantCtx)
			}
			cfg := trace.NewSpanStartConfig(opts...)
			if got := len(cfg.Links()) == 1 && cfg.NewRoot(); got != tc.wantLinks {
				t.Errorf("options link a new root: %v (links %v), want %v", got, cfg.Links(), tc.wantLinks)
			}
		})
	}
}
