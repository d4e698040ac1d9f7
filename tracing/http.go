package tracing

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Handler traces the requests of next whose path is under /v1/ (the API;
// probes, metrics and pages are not traced) with a server span named
// "<METHOD> <route>" (for example "POST /v1/chat" or "GET
// /v1/chat/{id}/stream") that, when the request has a W3C traceparent,
// is its child with trustParent, and otherwise links to it (FromClientHTTP).
// Every traced response carries the trace id in the
// Forever-Trace-Id header, set before next writes anything. Off, it
// returns next.
func Handler(t Tracer, trustParent bool, next http.Handler) http.Handler {
	if !t.On() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/") {
			next.ServeHTTP(w, r)
			return
		}
		ctx, opts := FromClientHTTP(r.Context(), r.Header, trustParent)
		ctx, span := t.Start(ctx, r.Method+" "+Route(r.URL.Path), append(opts, trace.WithSpanKind(trace.SpanKindServer))...)
		defer span.End()
		if span.IsRecording() {
			span.SetAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path))
		}
		if id := TraceID(ctx); id != "" {
			w.Header().Set(TraceIDHeader, id)
		}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(ctx))
		if span.IsRecording() && sw.code != 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", sw.code))
			if sw.code >= 500 {
				span.SetStatus(codes.Error, http.StatusText(sw.code))
			}
		}
	})
}

// Route is path with its agent id replaced by {id}: /v1/chat/a1/stream
// is /v1/chat/{id}/stream. It keeps span names to a small set.
func Route(path string) string {
	const chat = "/v1/chat/"
	rest, ok := strings.CutPrefix(path, chat)
	if !ok || rest == "" {
		return path
	}
	_, tail, _ := strings.Cut(rest, "/")
	if tail == "" {
		return chat + "{id}"
	}
	return chat + "{id}/" + tail
}

// statusWriter remembers the status code; it passes Flush on (SSE) and
// Unwrap (http.ResponseController, the WebSocket's Hijack).
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
