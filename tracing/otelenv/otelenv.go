// Package otelenv builds the OpenTelemetry TracerProvider that the
// standard OTEL_* environment variables describe, with the official Go
// SDK and its OTLP exporters: agentd's main calls it once and passes the
// provider down its configs. It installs nothing globally.
//
// Tracing is off (Setup returns a nil provider, and every Forever package
// then skips its spans at no cost) unless one of these is set:
//
//	OTEL_EXPORTER_OTLP_ENDPOINT          base URL of an OTLP receiver (http://collector:4318, or :4317 for grpc)
//	OTEL_EXPORTER_OTLP_TRACES_ENDPOINT   the traces endpoint itself (http://collector:4318/v1/traces)
//	OTEL_TRACES_EXPORTER                 otlp, console (JSON lines on stdout) or none; a comma list is allowed
//
// OTEL_SDK_DISABLED=true turns it off whatever else is set. Then:
//
//	OTEL_EXPORTER_OTLP_PROTOCOL          http/protobuf (default) or grpc; OTEL_EXPORTER_OTLP_TRACES_PROTOCOL beats it
//	OTEL_SERVICE_NAME                    service.name (default "agentd")
//	OTEL_RESOURCE_ATTRIBUTES             more resource attributes, key=value,...
//	OTEL_TRACES_SAMPLER, _ARG            the sampler (default parentbased_always_on)
//	OTEL_BSP_SCHEDULE_DELAY, ...         the batch span processor (default: export every 5 s)
//	OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _COMPRESSION, _CERTIFICATE, _INSECURE, ... and their _TRACES_ forms
//
// are read as the SDK and its exporters read them. http/json is not
// supported (the Go exporters speak protobuf); setting it is an error.
//
// The provider generates ids with tracing.IDGenerator, so that a span a
// crash left unended is resumed with its own id (tracing.Tracer.Resume).
package otelenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/forever-agents/forever/tracing"
)

// ErrConfig is returned for a variable with a value otelenv cannot use;
// the message names the variable.
var ErrConfig = errors.New("otelenv: bad OpenTelemetry configuration")

// ConfigError is every error of a variable otelenv cannot use, or of an
// exporter that cannot start; errors.Is(err, ErrConfig) holds for it.
type ConfigError struct {
	// Message is the sentence a user reads: the variable, its value and
	// what it takes, or the exporter and why it did not start.
	Message string
	// Err is the cause, when there is one.
	Err error
}

func (e *ConfigError) Error() string        { return ErrConfig.Error() + ": " + e.Message }
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }
func (e *ConfigError) Unwrap() error        { return e.Err }

func configErrorf(format string, a ...any) error {
	return &ConfigError{Message: fmt.Sprintf(format, a...)}
}

// Config is what the program adds to the environment's configuration.
type Config struct {
	// ServiceName is service.name when OTEL_SERVICE_NAME does not set it.
	// Default "agentd".
	ServiceName string
	// Attributes are resource attributes (service.instance.id, say);
	// OTEL_RESOURCE_ATTRIBUTES beats them.
	Attributes []attribute.KeyValue
	// Stdout receives the console exporter's spans. Default os.Stdout.
	Stdout io.Writer
	// Getenv reads the variables that turn tracing on and pick the
	// exporter. Default os.Getenv. The SDK and the exporters read the
	// others from the process environment themselves.
	Getenv func(string) string
}

// Setup returns the TracerProvider the environment describes and its
// shutdown, which flushes the spans not yet exported (call it at exit,
// with a deadline). When tracing is off it returns a nil provider and a
// shutdown that does nothing.
func Setup(ctx context.Context, cfg Config) (trace.TracerProvider, func(context.Context) error, error) {
	nothing := func(context.Context) error { return nil }
	if cfg.Getenv == nil {
		cfg.Getenv = os.Getenv
	}
	if cfg.ServiceName == "" {
		cfg.ServiceName = "agentd"
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	exporters, err := Exporters(cfg.Getenv)
	if err != nil || len(exporters) == 0 {
		return nil, nothing, err
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(append([]attribute.KeyValue{attribute.String("service.name", cfg.ServiceName)}, cfg.Attributes...)...),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && res == nil {
		return nil, nothing, &ConfigError{Message: fmt.Sprintf("OTEL_RESOURCE_ATTRIBUTES: %v", err), Err: err}
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithIDGenerator(tracing.IDGenerator{})}
	for _, name := range exporters {
		var exp sdktrace.SpanExporter
		switch name {
		case "console":
			exp, err = stdouttrace.New(stdouttrace.WithWriter(cfg.Stdout))
		case "otlp":
			exp, err = otlp(ctx, cfg.Getenv)
		}
		var ce *ConfigError
		if errors.As(err, &ce) {
			return nil, nothing, ce
		}
		if err != nil {
			return nil, nothing, &ConfigError{Message: fmt.Sprintf("the %s trace exporter cannot start: %v", name, err), Err: err}
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	return tp, tp.Shutdown, nil
}

// Exporters returns the exporters the environment asks for ("otlp",
// "console"), none when tracing is off.
func Exporters(getenv func(string) string) ([]string, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, nil
	}
	v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	if v == "" {
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return nil, nil
		}
		return []string{"otlp"}, nil
	}
	var out []string
	for _, name := range strings.Split(v, ",") {
		name = strings.ToLower(strings.TrimSpace(name))
		switch name {
		case "none":
		case "otlp", "console":
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		default:
			return nil, configErrorf("OTEL_TRACES_EXPORTER=%q: want otlp, console or none", v)
		}
	}
	return out, nil
}

// Protocol returns the OTLP protocol the environment asks for:
// "http/protobuf" (the default) or "grpc".
func Protocol(getenv func(string) string) (string, error) {
	name, v := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if v == "" {
		name, v = "OTEL_EXPORTER_OTLP_PROTOCOL", getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch strings.TrimSpace(v) {
	case "", "http/protobuf":
		return "http/protobuf", nil
	case "grpc":
		return "grpc", nil
	}
	return "", configErrorf("%s=%q: want http/protobuf or grpc (http/json is not supported)", name, v)
}

// otlp returns the OTLP exporter of the protocol the environment names;
// it reads its endpoint, headers and TLS settings from the environment.
func otlp(ctx context.Context, getenv func(string) string) (sdktrace.SpanExporter, error) {
	proto, err := Protocol(getenv)
	if err != nil {
		return nil, err
	}
	if proto == "grpc" {
		return otlptracegrpc.New(ctx)
	}
	return otlptracehttp.New(ctx)
}

// Export is where one exporter the environment asks for sends spans, as
// agentd's start-up log line shows it.
type Export struct {
	// Exporter is "otlp" or "console".
	Exporter string
	// Protocol is the OTLP protocol ("http/protobuf" or "grpc"); empty
	// for the console exporter.
	Protocol string
	// Endpoint is the URL the OTLP exporter sends to, without its user
	// information, query or fragment (they may hold credentials), or
	// "stdout" for the console exporter. Headers are never shown.
	Endpoint string
}

// Describe returns where the environment's exporters send spans, none
// when tracing is off, or the error Setup would return for a variable it
// cannot use. The OTLP endpoint is the one the exporter uses: the
// _TRACES_ variable as given, else OTEL_EXPORTER_OTLP_ENDPOINT (with
// /v1/traces appended for http/protobuf), else the exporter's default.
func Describe(getenv func(string) string) ([]Export, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	names, err := Exporters(getenv)
	if err != nil {
		return nil, err
	}
	var out []Export
	for _, name := range names {
		if name == "console" {
			out = append(out, Export{Exporter: name, Endpoint: "stdout"})
			continue
		}
		proto, err := Protocol(getenv)
		if err != nil {
			return nil, err
		}
		out = append(out, Export{Exporter: name, Protocol: proto, Endpoint: redactEndpoint(otlpEndpoint(getenv, proto))})
	}
	return out, nil
}

// otlpEndpoint is the traces endpoint the OTLP exporter of proto uses.
func otlpEndpoint(getenv func(string) string, proto string) string {
	if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")); v != "" {
		return v
	}
	base := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	if proto == "grpc" {
		if base == "" {
			return "http://localhost:4317"
		}
		return base
	}
	if base == "" {
		return "http://localhost:4318/v1/traces"
	}
	if u, err := url.Parse(base); err == nil && u.Host != "" {
		u.Path = strings.TrimRight(u.Path, "/") + "/v1/traces"
		return u.String()
	}
	return strings.TrimRight(base, "/") + "/v1/traces"
}

// redactEndpoint drops what may hold a credential from an endpoint URL:
// its user information, query and fragment.
func redactEndpoint(v string) string {
	u, err := url.Parse(v)
	if err != nil || u.Host == "" {
		// Not a URL (a bare host:port, say): keep what precedes any '@',
		// '?' or '#' out of caution.
		if i := strings.LastIndex(v, "@"); i >= 0 {
			v = v[i+1:]
		}
		if i := strings.IndexAny(v, "?#"); i >= 0 {
			v = v[:i]
		}
		return v
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}
