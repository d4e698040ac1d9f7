package host

import (
	"context"
	"net/http"
	"strconv"

	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/forever-agents/forever/tracing"
)

// Spans of the host (the daemon's Config.TracerProvider):
//
//	command <verb>    a command answered by this node (server kind): the child
//	                  of the forwarding node's span when another node forwarded
//	                  it (forever.command.forwarded), else of the traceparent
//	                  header of the client's NATS request with
//	                  --trust-traceparent, else a new trace linked to it
//	forward <verb>    a command sent on to the agent's owner (client kind)
//	partition.acquire a partition taken: its views caught up, its agents
//	                  activated (their recovery started)
//	partition.release a partition lost or handed off: its agents stopped
//
// Partition spans are made only in a cluster (another node alive): a
// single node takes every partition at each start, which moves nothing.
const (
	spanPartitionAcquire = "partition.acquire"
	spanPartitionRelease = "partition.release"
)

// startCommandSpan starts the server span of a command that arrived with
// headers; ctx gets the span. A forwarded command's traceparent is a
// node's, its parent; a client's is one with Config.TrustTraceparent, and
// a link otherwise (tracing.FromClient).
func (h *Host) startCommandSpan(ctx context.Context, headers map[string][]string, subject, agent, verb string, forwarded bool) (context.Context, trace.Span) {
	if !h.tracer.On() {
		return ctx, trace.SpanFromContext(ctx)
	}
	ctx, opts := tracing.FromClient(ctx, headers, forwarded || h.deps.Config.TrustTraceparent)
	ctx, span := h.tracer.Start(ctx, "command "+verb, append(opts, trace.WithSpanKind(trace.SpanKindServer))...)
	if span.IsRecording() {
		span.SetAttributes(tracing.AgentID.String(agent), tracing.Verb.String(verb), tracing.Node.String(h.own.Node()),
			attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", subject))
		if forwarded {
			span.SetAttributes(tracing.Forwarded.Bool(true))
		}
	}
	return ctx, span
}

// endCommandSpan ends a command's span with its error, if any: a client's
// mistake (4xx) is not the server's error.
func endCommandSpan(span trace.Span, err error) {
	if span.IsRecording() && err != nil {
		code := StatusCode(err)
		span.SetAttributes(attribute.Int("forever.command.code", code))
		if code >= http.StatusInternalServerError {
			span.SetStatus(codes.Error, ClientError(err).Message)
		}
	}
	span.End()
}

// traceHeaders are the headers of a reply to a command that ran in ctx's
// trace: Forever-Trace-Id, when tracing is on.
func traceHeaders(ctx context.Context) micro.Headers {
	id := tracing.TraceID(ctx)
	if id == "" {
		return nil
	}
	return micro.Headers{tracing.TraceIDHeader: []string{id}}
}

// startForwardSpan starts the client span of a command forwarded to node;
// the caller injects ctx into the request's headers.
func (h *Host) startForwardSpan(ctx context.Context, node string, cmd Command) (context.Context, trace.Span) {
	ctx, span := h.tracer.Start(ctx, "forward "+cmd.Verb, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(tracing.AgentID.String(cmd.Agent), tracing.Verb.String(cmd.Verb), tracing.Node.String(node),
			attribute.String("messaging.system", "nats"))
	}
	return ctx, span
}

// startPartitionSpan starts a partition.acquire or partition.release span,
// in a cluster.
func (h *Host) startPartitionSpan(name string, p int, epoch uint64) trace.Span {
	if !h.tracer.On() || len(h.own.Nodes()) < 2 {
		return trace.SpanFromContext(context.Background())
	}
	_, span := h.tracer.Start(context.Background(), name)
	if span.IsRecording() {
		span.SetAttributes(tracing.Partition.Int(p), tracing.Epoch.String(strconv.FormatUint(epoch, 10)), tracing.Node.String(h.own.Node()))
	}
	return span
}
