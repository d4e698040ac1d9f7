// Package tracingtest runs the real Jaeger all-in-one (v2: an
// OpenTelemetry collector with Jaeger's in-memory storage and query API)
// for tests that check what Forever exports over OTLP.
//
// Jaeger is not a Go dependency of Forever: .ci/jaeger builds it into
// $(go env GOPATH)/bin from a throwaway module. StartJaeger finds it there,
// on PATH, or at $FOREVER_JAEGER; without it the test is skipped, unless
// FOREVER_REQUIRE_JAEGER is set. CI does not build it (a cold build costs
// about 9 CPU-minutes); the in-memory exporter's tests (agentd/host, chat,
// fiber, tracing) run there, and the Jaeger ones by hand:
// .ci/jaeger && FOREVER_REQUIRE_JAEGER=1 go test ./agentd/cmd/agentd -run TestBinary/Tracing.
package tracingtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/build"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/internal/freeport"
)

// Jaeger is a running Jaeger all-in-one, on loopback ports of its own.
type Jaeger struct {
	// OTLPHTTP is the OTLP/HTTP receiver's base URL (http://127.0.0.1:port),
	// OTEL_EXPORTER_OTLP_ENDPOINT for http/protobuf; OTLPGRPC the OTLP/gRPC
	// receiver's (for OTEL_EXPORTER_OTLP_PROTOCOL=grpc).
	OTLPHTTP, OTLPGRPC string
	// Query is the query service's base URL (the HTTP API the UI uses).
	Query string

	out *syncBuffer
}

// Path returns the jaeger binary to run: $FOREVER_JAEGER, jaeger on PATH,
// or $(go env GOPATH)/bin/jaeger; "" when there is none.
func Path() string {
	if p := os.Getenv("FOREVER_JAEGER"); p != "" {
		return p
	}
	if p, err := exec.LookPath("jaeger"); err == nil {
		return p
	}
	for _, dir := range filepath.SplitList(build.Default.GOPATH) {
		p := filepath.Join(dir, "bin", "jaeger")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// config is Jaeger v2's configuration for a test: the OTLP receiver and
// the query API on the given loopback ports, spans in memory, its own
// telemetry off.
const config = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: []
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memory:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memory
    http:
      endpoint: %s
    grpc:
      endpoint: %s
receivers:
  otlp:
    protocols:
      http:
        endpoint: %s
      grpc:
        endpoint: %s
exporters:
  jaeger_storage_exporter:
    trace_storage: memory
`

// StartJaeger runs Jaeger until the test ends. It skips the test when
// there is no jaeger binary, and fails it in CI.
func StartJaeger(t testing.TB) *Jaeger {
	t.Helper()
	bin := Path()
	if bin == "" {
		if os.Getenv("FOREVER_REQUIRE_JAEGER") != "" {
			t.Fatal("no jaeger binary: .ci/jaeger builds it into $(go env GOPATH)/bin")
		}
		t.Skip("no jaeger binary (run .ci/jaeger, or set FOREVER_JAEGER)")
	}
	query, queryGRPC, otlpHTTP, otlpGRPC := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, config, query, queryGRPC, otlpHTTP, otlpGRPC), 0o644); err != nil {
		t.Fatal(err)
	}
	j := &Jaeger{OTLPHTTP: "http://" + otlpHTTP, OTLPGRPC: "http://" + otlpGRPC, Query: "http://" + query, out: &syncBuffer{}}
	cmd := exec.Command(bin, "--config", "file:"+cfg)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = j.out, j.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start jaeger: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(j.Query + "/api/services")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && listening(otlpHTTP) && listening(otlpGRPC) {
				return j
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("jaeger exited: %v\n%s", err, j.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger not serving after 60s:\n%s", j.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Output is what Jaeger logged.
func (j *Jaeger) Output() string { return j.out.String() }

// Env is the environment that makes a process export its traces to j
// over OTLP/HTTP, exporting spans 100 ms after they end.
func (j *Jaeger) Env(service string) []string {
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + j.OTLPHTTP, "OTEL_SERVICE_NAME=" + service, "OTEL_BSP_SCHEDULE_DELAY=100"}
}

// Span is a span as Jaeger's query API returns it.
type Span struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64 `json:"startTime"` // microseconds since the epoch
	Duration  int64 `json:"duration"`
	Tags      []KV  `json:"tags"`
	Logs      []struct {
		Timestamp int64 `json:"timestamp"`
		Fields    []KV  `json:"fields"`
	} `json:"logs"`
	ProcessID string `json:"processID"`
}

// KV is a tag or a log field.
type KV struct {
	Key   string          `json:"key"`
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
}

// String is the value as text: a string unquoted, anything else as JSON.
func (kv KV) String() string {
	var s string
	if json.Unmarshal(kv.Value, &s) == nil {
		return s
	}
	return string(kv.Value)
}

// Tag returns the value of the span's tag key.
func (s Span) Tag(key string) (string, bool) { return find(s.Tags, key) }

// Parent returns the span id of the span's CHILD_OF parent, "" for a root.
func (s Span) Parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// Events returns the names of the span's events (Jaeger's logs), with
// their fields.
func (s Span) Events() []map[string]string {
	var out []map[string]string
	for _, l := range s.Logs {
		m := map[string]string{}
		for _, f := range l.Fields {
			m[f.Key] = f.String()
		}
		out = append(out, m)
	}
	return out
}

func find(kvs []KV, key string) (string, bool) {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.String(), true
		}
	}
	return "", false
}

// Trace returns the spans of trace id (32 hex digits) stored so far; none
// when Jaeger has none.
func (j *Jaeger) Trace(ctx context.Context, id string) ([]Span, error) {
	var body struct {
		Data []struct {
			Spans []Span `json:"spans"`
		} `json:"data"`
	}
	if err := j.get(ctx, "/api/traces/"+id, &body); err != nil {
		return nil, err
	}
	var out []Span
	for _, tr := range body.Data {
		out = append(out, tr.Spans...)
	}
	return out, nil
}

// Traces returns the spans of the traces of service that have a span
// named operation (up to limit traces).
func (j *Jaeger) Traces(ctx context.Context, service, operation string, limit int) ([]Span, error) {
	var body struct {
		Data []struct {
			Spans []Span `json:"spans"`
		} `json:"data"`
	}
	q := "/api/traces?service=" + service + "&lookback=1h&limit=" + strconv.Itoa(limit)
	if operation != "" {
		q += "&operation=" + url.QueryEscape(operation)
	}
	if err := j.get(ctx, q, &body); err != nil {
		return nil, err
	}
	var out []Span
	for _, tr := range body.Data {
		out = append(out, tr.Spans...)
	}
	return out, nil
}

func (j *Jaeger) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.Query+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil // an empty answer: nothing stored yet
	}
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return fmt.Errorf("jaeger %s: %s: %s", path, resp.Status, b.String())
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// WaitTrace polls trace id until done says it is complete, and returns
// its spans; it fails the test after 30 s.
func (j *Jaeger) WaitTrace(t testing.TB, id string, done func([]Span) bool) []Span {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var spans []Span
	for {
		var err error
		spans, err = j.Trace(t.Context(), id)
		if err == nil && done(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			var names []string
			for _, s := range spans {
				names = append(names, s.OperationName)
			}
			t.Fatalf("trace %s incomplete after 30s (err %v): spans %q", id, err, names)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func listening(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// freeAddr returns a loopback host:port reserved until the test ends
// (internal/freeport).
func freeAddr(t testing.TB) string {
	t.Helper()
	addr, release, err := freeport.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return addr
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
