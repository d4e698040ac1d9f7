package otelenv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/forever-agents/forever/tracing"
	"github.com/forever-agents/forever/tracing/otelenv"
	"github.com/forever-agents/forever/tracing/tracingtest"
)

func env(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

func TestExporters(t *testing.T) {
	cases := []struct {
		name    string
		env     map[string]string
		want    []string
		wantErr bool
	}{
		{name: "nothing set: off", env: nil},
		{name: "service name alone: off", env: map[string]string{"OTEL_SERVICE_NAME": "x"}},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, want: []string{"otlp"}},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, want: []string{"otlp"}},
		{name: "none beats the endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}},
		{name: "console", env: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, want: []string{"console"}},
		{name: "a list", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp, console,otlp"}, want: []string{"otlp", "console"}},
		{name: "disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}},
		{name: "unknown exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := otelenv.Exporters(env(c.env))
			if (err != nil) != c.wantErr || !slices.Equal(got, c.want) {
				t.Fatalf("Exporters = %q, %v; want %q (error %v)", got, err, c.want, c.wantErr)
			}
			if err != nil && (!errors.Is(err, otelenv.ErrConfig) || !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER")) {
				t.Errorf("error %q does not name the variable", err)
			}
		})
	}
}

func TestProtocol(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
		err  bool
	}{
		{nil, "http/protobuf", false},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "grpc", false},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, "http/protobuf", false},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "", true},
	} {
		got, err := otelenv.Protocol(env(c.env))
		if got != c.want || (err != nil) != c.err {
			t.Errorf("Protocol(%v) = %q, %v; want %q", c.env, got, err, c.want)
		}
	}
}

// TestSetupOff: with no variable set, tracing is off: no provider.
func TestSetupOff(t *testing.T) {
	tp, shutdown, err := otelenv.Setup(t.Context(), otelenv.Config{Getenv: env(nil)})
	if err != nil || tp != nil {
		t.Fatalf("Setup = %v, %v; want a nil provider", tp, err)
	}
	if err := shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestSetupConsole: OTEL_TRACES_EXPORTER=console writes the spans to
// Stdout, with the service name from OTEL_SERVICE_NAME.
func TestSetupConsole(t *testing.T) {
	t.Setenv("OTEL_SERVICE_NAME", "console-test")
	var out bytes.Buffer
	tp, shutdown, err := otelenv.Setup(t.Context(), otelenv.Config{
		Getenv: env(map[string]string{"OTEL_TRACES_EXPORTER": "console"}), Stdout: &out,
	})
	if err != nil || tp == nil {
		t.Fatalf("Setup: %v", err)
	}
	_, span := tracing.New(tp, "test").Start(t.Context(), "hello")
	span.End()
	if err := shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"Name":"hello"`) || !strings.Contains(out.String(), "console-test") {
		t.Fatalf("console output %q lacks the span or the service name", out.String())
	}
}

// TestSetupOTLP: a span reaches the real Jaeger over OTLP, with either
// protocol, under the service name of OTEL_SERVICE_NAME.
func TestSetupOTLP(t *testing.T) {
	j := tracingtest.StartJaeger(t)
	for _, proto := range []string{"http/protobuf", "grpc"} {
		t.Run(proto, func(t *testing.T) {
			endpoint := j.OTLPHTTP
			if proto == "grpc" {
				endpoint = j.OTLPGRPC
			}
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", proto)
			t.Setenv("OTEL_SERVICE_NAME", "otelenv-test")
			tp, shutdown, err := otelenv.Setup(context.Background(), otelenv.Config{})
			if err != nil || tp == nil {
				t.Fatalf("Setup: %v", err)
			}
			ctx, span := tracing.New(tp, "test").Start(t.Context(), "over "+proto)
			id := tracing.TraceID(ctx)
			span.End()
			if err := shutdown(t.Context()); err != nil {
				t.Fatal(err)
			}
			spans := j.WaitTrace(t, id, func(s []tracingtest.Span) bool { return len(s) > 0 })
			if spans[0].OperationName != "over "+proto {
				t.Fatalf("Jaeger has %q", spans[0].OperationName)
			}
		})
	}
}

// TestDescribe: what agentd's start-up line says about tracing: off, or
// each exporter with its protocol and endpoint, credentials left out.
func TestDescribe(t *testing.T) {
	cases := []struct {
		name    string
		env     map[string]string
		want    []otelenv.Export
		wantErr bool
	}{
		{name: "off"},
		{name: "disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		{name: "base endpoint over http", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"},
			want: []otelenv.Export{{Exporter: "otlp", Protocol: "http/protobuf", Endpoint: "http://c:4318/v1/traces"}}},
		{name: "traces endpoint as given", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://b/otlp/traces"},
			want: []otelenv.Export{{Exporter: "otlp", Protocol: "http/protobuf", Endpoint: "https://b/otlp/traces"}}},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			want: []otelenv.Export{{Exporter: "otlp", Protocol: "grpc", Endpoint: "http://c:4317"}}},
		{name: "default endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp,console"},
			want: []otelenv.Export{{Exporter: "otlp", Protocol: "http/protobuf", Endpoint: "http://localhost:4318/v1/traces"}, {Exporter: "console", Endpoint: "stdout"}}},
		{name: "credentials left out", env: map[string]string{
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://user:s3cret@c:4318/v1/traces?api_key=s3cret#s3cret",
			"OTEL_EXPORTER_OTLP_HEADERS":         "authorization=Bearer s3cret"},
			want: []otelenv.Export{{Exporter: "otlp", Protocol: "http/protobuf", Endpoint: "https://c:4318/v1/traces"}}},
		{name: "bare host credentials left out", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "u:s3cret@c:4317?k=s3cret", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			want: []otelenv.Export{{Exporter: "otlp", Protocol: "grpc", Endpoint: "c:4317"}}},
		{name: "bad protocol", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := otelenv.Describe(env(c.env))
			if (err != nil) != c.wantErr || !slices.Equal(got, c.want) {
				t.Fatalf("Describe = %+v, %v; want %+v (error %v)", got, err, c.want, c.wantErr)
			}
			if s := fmt.Sprint(got); strings.Contains(s, "s3cret") {
				t.Errorf("Describe shows a credential: %s", s)
			}
		})
	}
}
