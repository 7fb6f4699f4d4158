// Package tracingtest records a test's OpenTelemetry spans in memory.
package tracingtest

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Install makes a tracer provider that records every span in the returned
// exporter the global one, with the W3C trace-context and baggage
// propagators (as tracing.Setup installs them), until the test ends. Tests
// that use it must not run in parallel.
func Install(t testing.TB) (*tracetest.InMemoryExporter, *sdktrace.TracerProvider) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	t.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
		_ = tp.Shutdown(context.Background())
	})
	return exp, tp
}

// ByName returns the spans by name (the last one of each name).
func ByName(spans tracetest.SpanStubs) map[string]tracetest.SpanStub {
	m := make(map[string]tracetest.SpanStub, len(spans))
	for _, s := range spans {
		m[s.Name] = s
	}
	return m
}

// NoAttributeContains fails the test for every span attribute whose value
// contains secret (a canary argument, output or key).
func NoAttributeContains(t testing.TB, spans tracetest.SpanStubs, secret string) {
	t.Helper()
	for _, s := range spans {
		for _, a := range s.Attributes {
			if strings.Contains(a.Value.Emit(), secret) {
				t.Errorf("span %q attribute %s carries %q", s.Name, a.Key, secret)
			}
		}
	}
}
