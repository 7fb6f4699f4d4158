// Package tracingsdk sets up OpenTelemetry tracing for toolfleet's
// processes: the SDK and its OTLP exporter, which only the commands import
// (the libraries use the OpenTelemetry API alone, through package tracing,
// and record spans when a program installs a provider).
//
// Tracing is off unless the standard OpenTelemetry environment configures
// an OTLP endpoint: OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (OTLP over HTTP, protobuf). The other
// standard variables apply as the exporter and SDK read them:
// OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER(_ARG), OTEL_BSP_*.
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none keeps it off.
//
// Spans carry ids, tool names, outcomes, counts and token usage — never
// argument values, outputs or error messages, unless the operator opted in
// (--trace-args adds argument values).
package tracingsdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Enabled reports whether the environment asks for traces.
func Enabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	if e := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))); e != "" && e != "otlp" {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup installs, when [Enabled], a global tracer provider exporting over
// OTLP/HTTP with a batch processor, and the W3C trace-context propagator.
// service names the process (OTEL_SERVICE_NAME wins). The returned shutdown
// flushes and stops the exporter; it is a no-op when tracing is off.
func Setup(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if !Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, errors.New("tracing: the OTLP exporter configuration is invalid")
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", service)))
	if err != nil {
		res = resource.Default()
	}
	if env, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, env); err == nil {
			res = merged
		}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// Main runs a process's main function f with tracing set up for service
// (when the environment asks for it) and flushed, within 5 seconds, after
// f returns. A configuration the exporter refuses is reported on stderr and
// the process runs without traces.
func Main(service string, stderr io.Writer, f func() int) int {
	shutdown, err := Setup(context.Background(), service)
	if err != nil {
		fmt.Fprintln(stderr, service+":", err, "(running without traces)")
		return f()
	}
	code := f()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		fmt.Fprintln(stderr, service+": tracing: could not flush the last spans")
	}
	return code
}
