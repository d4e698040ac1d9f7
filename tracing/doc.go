// Package tracing is what Forever's packages share to trace with
// OpenTelemetry: a Tracer that costs nothing when tracing is off, the W3C
// Trace Context on NATS and HTTP headers, spans stored in events and
// resumed after a crash, and the attribute names of the GenAI semantic
// conventions. It imports only the OpenTelemetry API; the SDK and the
// exporters are set up by package tracing/otelenv, in main.
//
// # Model
//
// A program passes a trace.TracerProvider down its configs (nil: off);
// each package makes its Tracer with New. Nothing is global: propagation
// uses W3C Trace Context (traceparent, tracestate) as a value, never
// otel's global propagator.
//
// Work outlives processes here, spans do not: the SDK exports a span when
// it ends, and a process killed under a turn never ends it. So the span
// that stands for a piece of durable work is stored with the work (its
// traceparent, written by Format into the event that starts it: a chat
// turn's turn.started, a fiber's fiber.started) and resumed by the run
// that finishes the work (Tracer.Resume): same trace id, same span id,
// same parent, the original start time. Only that last run ends it, so
// the backend receives it once, and the spans the dead process exported
// under it keep their parent. Each recovery adds a forever.recovery event
// (EventRecovery) with its attempt. The span id comes from IDGenerator,
// which the provider must use (otelenv's does); under another provider a
// resumed span is a new span with the same parent.
//
// Spans ended in the last moments before a SIGKILL (the batch span
// processor exports every OTEL_BSP_SCHEDULE_DELAY, 5 s by default) are
// lost with the process; the event log stays the record of what ran.
//
// # On the wire
//
// A NATS command or an HTTP request that carries a traceparent header
// (any case) starts a trace of its own with a link to it, or, when the
// operator trusts the clients (agentd --trust-traceparent), is its child
// (FromClient, FromClientHTTP); a command forwarded to another node carries
// the forwarding span's (Inject) and is its child. Replies carry
// the trace id in TraceIDHeader (Forever-Trace-Id) when tracing is on.
//
// # Invariants
//
//   - Off (a nil or no-op provider), Tracer.Start returns its ctx and a
//     span that records nothing, allocating nothing; callers build
//     attributes only when span.IsRecording().
//   - A span resumed by Tracer.Resume has the ids it resumes only for the
//     span itself: its children get ids of their own.
package tracing
